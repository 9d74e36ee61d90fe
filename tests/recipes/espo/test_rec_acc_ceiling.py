"""The best achievable RecAcc: 1 where every label follows from the preference the intent names
and the candidate's rank in the listed pool; the majority share of each information class
where a hidden per-user draw mixes them; loaded records without a scenario left out."""

from __future__ import annotations

import dataclasses

import pytest

from odyssey_core.envs.persona.dataset import generate_episodes
from odyssey_core.envs.persona.episode import EpisodeRecord
from odyssey_core.envs.persona.users import User
from odyssey_core.protocol.gui import GuiAction
from odyssey_core.recipes.espo.evaluation import best_achievable_rec_acc


@pytest.fixture(scope="module")
def episodes() -> list[EpisodeRecord]:
    return generate_episodes("smartspot_like", 0)


def test_generated_labels_are_all_decidable(episodes: list[EpisodeRecord]) -> None:
    ceiling = best_achievable_rec_acc(episodes)
    asked = sum(len(e.stage_steps("recommend")) for e in episodes)
    assert (ceiling.value, ceiling.judged, ceiling.steps, ceiling.mixed) == (1.0, asked, asked, 0)
    assert "100.0%" in ceiling.line()


def _top_one(episode: EpisodeRecord) -> EpisodeRecord:
    """The episode as a user who accepts only the best item would have labelled it."""
    best = episode.yes_items[0]
    steps = tuple(
        dataclasses.replace(
            s, gold=GuiAction("recommendation", input_text="Yes" if s.candidate == best else "No")
        )
        if s.stage == "recommend"
        else s
        for s in episode.steps
    )
    return dataclasses.replace(episode, steps=steps, yes_items=(best,))


def test_a_hidden_top_one_or_top_two_draw_lowers_the_ceiling(
    episodes: list[EpisodeRecord],
) -> None:
    # two hotel users of one archetype: the same preference, pools of four
    hotel = [e for e in episodes if e.channel == "hotel"]
    by_kind: dict[str, list[EpisodeRecord]] = {}
    for e in hotel:
        by_kind.setdefault(User.from_json(e.scenario["user"]).archetype, []).append(e)
    a, b = next(group for group in by_kind.values() if len(group) >= 2)[:2]
    assert len(a.candidates) == len(b.candidates) == 4
    # b's user takes only the best: the second-ranked candidate is Yes for a, No for b, and
    # nothing on screen tells them apart; the best agent gets one of the two wrong
    ceiling = best_achievable_rec_acc([a, _top_one(b)])
    assert ceiling.value == pytest.approx(7 / 8)
    assert (ceiling.judged, ceiling.mixed) == (8, 2)
    assert best_achievable_rec_acc([a, b]).value == 1.0


def test_records_without_a_scenario_are_left_out_and_counted(
    episodes: list[EpisodeRecord],
) -> None:
    loaded = [dataclasses.replace(e, scenario={}) for e in episodes[:3]]
    ceiling = best_achievable_rec_acc(loaded)
    assert ceiling.value is None and ceiling.judged == 0
    assert ceiling.steps == sum(len(e.stage_steps("recommend")) for e in loaded)
    assert "not computable" in ceiling.line()
    mixed = best_achievable_rec_acc([*loaded, episodes[5]])
    assert mixed.value == 1.0 and mixed.judged == len(episodes[5].stage_steps("recommend"))
    assert "left out" in mixed.line()

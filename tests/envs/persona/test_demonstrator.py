"""The demonstrator: optimal sets hold the gold action on every non-detour step, clicks land
inside their targets, replayed demonstrations reach the pool the label oracle agrees with,
detours are flagged and recovered from."""

from __future__ import annotations

import random

import pytest

from odyssey_core.envs.persona.app import PersonaApp
from odyssey_core.envs.persona.catalog import CHANNEL_SPECS, CHANNELS
from odyssey_core.envs.persona.dataset import generate_episodes
from odyssey_core.envs.persona.demonstrator import (
    optimal_moves,
    point_in,
    record_demonstration,
    task_app,
)
from odyssey_core.envs.persona.episode import EpisodeRecord
from odyssey_core.envs.persona.screen import box_contains
from odyssey_core.envs.persona.users import User, sample_user
from odyssey_core.protocol.gui import GuiAction


@pytest.fixture(scope="module")
def episodes() -> list[EpisodeRecord]:
    return generate_episodes("tiny", seed=0)


def make_app(channel: str, seed: int, popup: str | None = "results") -> PersonaApp:
    user = sample_user(channel, random.Random(f"demo:{channel}:{seed}"))
    return PersonaApp({"catalog_seed": 0, "user": user.to_json(), "popup": popup}, 224, 448)


def test_gold_is_optimal_and_clicks_land_inside_their_targets(episodes) -> None:
    centred = 0
    for episode in episodes:
        for step in episode.steps:
            if not step.detour:
                assert (step.gold.action, step.target_id) in step.optimal, (
                    episode.episode_id,
                    step,
                )
            if step.gold.spatial:
                box = step.target_box
                assert box is not None and box_contains(box, step.gold.point)
                assert step.screen.hit(step.gold.point).id == step.target_id
                x0, y0, x1, y1 = box
                centred += step.gold.point == ((x0 + x1) // 2, (y0 + y1) // 2)
            else:
                assert step.target_id is None
    spatial = sum(s.gold.spatial for e in episodes for s in e.steps)
    assert centred < spatial / 2  # points spread over the boxes


def test_replaying_a_demonstration_reaches_the_pool_the_oracle_labels(episodes) -> None:
    for episode in episodes:
        app = PersonaApp(episode.scenario, episode.width, episode.height)
        state = app.initial_state()
        for step in episode.stage_steps("search"):
            assert app.screen(state) == step.screen  # the recorded screen is the live one
            state = app.apply(state, step.gold)
        (pool,) = episode.stage_steps("pool")
        assert app.screen(state) == pool.screen and pool.gold.text == episode.intent
        assert app.pool(state) == list(episode.candidates)
        catalogue = app.items(app.user.pool_app)
        for step in episode.stage_steps("recommend"):
            assert step.screen == app.screen(app.detail_state(state, step.candidate))
            assert step.gold.text == app.user.label(app.item(step.candidate), catalogue)
        assert set(episode.yes_items) == set(app.user.yes_items(catalogue))
        assert 1 <= len(episode.yes_items) < len(episode.candidates)


def test_detours_are_flagged_and_the_next_step_is_a_way_back() -> None:
    kinds = set()
    for channel in ("hotel", "travel", "food"):
        for seed in range(3):
            app = make_app(channel, seed)
            rng = random.Random(seed)
            record = record_demonstration(app, "e", rng, detour_p=1.0, max_detours=2)
            detours = [s for s in record.steps if s.detour]
            assert len(detours) == 2
            for step in detours:
                assert (step.gold.action, step.target_id) not in step.optimal
                kinds.add(step.gold.action if not step.target_id else step.target_id.split("-")[0])
                after = record.steps[step.index + 1]
                assert not after.detour and (after.gold.action, after.target_id) in after.optimal
            # the detours cost steps but not the outcome
            plain = record_demonstration(app, "e", random.Random(seed), detour_p=0.0)
            assert plain.candidates == record.candidates and plain.yes_items == record.yes_items
            assert len(plain.steps) < len(record.steps)
    assert {"app", "row"} <= kinds  # a wrong app, a wrong item


def test_optimal_sets_list_every_way_forward() -> None:
    app = make_app("flight", 0, popup="search")
    state = app.apply(app.initial_state(), GuiAction("click", (0, 0)))
    assert [m.key for m in optimal_moves(app, state)] == [("click", "app-flight")]
    state = app.apply(state, GuiAction("click", app.screen(state).element("app-flight").center))
    assert state.sheet == "popup"
    assert {m.key for m in optimal_moves(app, state)} == {
        ("exit", None),
        ("click", "popup-close"),
        ("click", "popup-dismiss"),
    }
    state = app.apply(state, GuiAction("exit"))
    keys = [m.key for m in optimal_moves(app, state)]
    # every unfilled field may come first (the origin is prefilled); typing straight into a
    # text field works too
    assert keys == [
        ("click", "field-destination"),
        ("type", "field-destination"),
        ("click", "field-date"),
    ]
    wrong = app.apply(state, GuiAction("click", app.screen(state).element("search").center))
    assert wrong.screen == "results"  # searched with empty fields: back to the form
    assert [m.key for m in optimal_moves(app, wrong)] == [("exit", None), ("click", "back")]


def test_the_trip_books_the_users_flight_before_the_hotel() -> None:
    app = make_app("travel", 1)
    record = record_demonstration(app, "trip", random.Random(0), detour_p=0.0)
    flight = app.user.choice("flight", app.items("flight"))
    targets = [s.target_id for s in record.steps]
    assert f"row-{flight.id}" in targets and "book" in targets
    assert targets.index("book") < targets.index("app-hotel")
    state = app.initial_state()
    for step in record.stage_steps("search"):
        state = app.apply(state, step.gold)
    assert state.booked == (flight.id,) and task_app(app, state) == "hotel"
    assert all(c.startswith("HT-") for c in record.candidates)


@pytest.mark.parametrize("channel", CHANNELS)
def test_every_channel_demonstrates_search_pool_and_recommend(channel: str) -> None:
    record = record_demonstration(make_app(channel, 7, popup=None), "x", random.Random(7))
    stages = [s.stage for s in record.steps]
    assert stages[0] == "search" and stages.count("pool") == 1
    assert stages[stages.index("pool") + 1 :] == ["recommend"] * len(record.candidates)
    pool_app = User.from_json(record.scenario["user"]).pool_app
    assert len(record.candidates) in CHANNEL_SPECS[pool_app].items_per_cell


def test_point_in_stays_in_the_middle_of_the_box() -> None:
    rng = random.Random(0)
    points = [point_in((10, 20, 109, 69), rng) for _ in range(200)]
    assert all(30 <= x <= 89 and 30 <= y <= 59 for x, y in points)  # the middle 60%
    assert len(set(points)) > 50
    assert point_in((10, 20, 109, 69), None) == (59, 44)

"""ESPO's metrics, intervals and trivial baselines on hand-built episodes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from odyssey_core.envs.persona.episode import EpisodeRecord, StepRecord
from odyssey_core.envs.persona.screen import Element, Screen
from odyssey_core.protocol.gui import GuiAction, format_gui_answer
from odyssey_core.recipes.espo.metrics import (
    StepOutcome,
    cluster_bootstrap,
    evaluate_outcomes,
    metrics_table_markdown,
    operation_string,
    outcome_from_response,
    trivial_baselines,
    wilson_interval,
)

W, H = 100, 200
SCREEN = Screen(
    "search",
    W,
    H,
    (
        Element("city", "field", (10, 10, 89, 29), command="focus:city"),
        Element("go", "button", (10, 40, 49, 59), "Search", command="search"),
    ),
)


def step(index: int, stage: str, gold: GuiAction, target: str | None = None) -> StepRecord:
    candidate = f"item-{index}" if stage == "recommend" else None
    return StepRecord(index, stage, SCREEN, f"s{index}.png", gold, target, candidate=candidate)


def episode(episode_id: str, intent: str, steps: list[StepRecord]) -> EpisodeRecord:
    yes = tuple(s.candidate for s in steps if s.candidate and s.gold.text == "Yes")
    return EpisodeRecord(episode_id, "hotel", "any hotels?", intent, {}, yes, W, H, tuple(steps))


def pool(index: int, summary: str) -> StepRecord:
    return step(index, "pool", GuiAction("pool_found", input_text=summary))


def rec(index: int, label: str) -> StepRecord:
    return step(index, "recommend", GuiAction("recommendation", input_text=label))


EP_A = episode(
    "a",
    "hotels in new york under 200 dollars",
    [
        step(0, "search", GuiAction("type", (50, 20), "new york"), "city"),
        step(1, "search", GuiAction("click", (30, 50)), "go"),
        step(2, "search", GuiAction("scroll down")),
        pool(3, "hotels in new york under 200"),
        rec(4, "Yes"),
        rec(5, "No"),
    ],
)
EP_B = episode(
    "b",
    "cheap flights to sydney",
    [
        step(0, "search", GuiAction("click", (20, 45)), "go"),
        pool(1, "cheap flights to sydney"),
        rec(2, "No"),
        rec(3, "Yes"),
    ],
)


def answer(action: GuiAction) -> str:
    return format_gui_answer(action, "looking at the screen")


RESPONSES = {
    "a": [
        answer(GuiAction("type", (89, 29), "New York City")),  # on the box's corner
        answer(GuiAction("click", (60, 50))),  # right of the button (x1 = 49)
        answer(GuiAction("scroll up")),
        answer(GuiAction("pool_found", input_text="New York hotels")),
        answer(GuiAction("recommendation", input_text="Yes")),
        answer(GuiAction("recommendation", input_text="Yes")),
    ],
    "b": [
        "I would click the search button.",  # no answer block: unparsable
        # a readable action in a broken format (two think blocks): scored, but not format-valid
        "<think>x</think>" + answer(GuiAction("pool_found", input_text="flights to Sydney")),
        answer(GuiAction("recommendation", input_text="No")),
        answer(GuiAction("recommendation", input_text="no.")),
    ],
}


def outcomes() -> list[StepOutcome]:
    return [
        outcome_from_response(s, ep, text)
        for ep in (EP_A, EP_B)
        for s, text in zip(ep.steps, RESPONSES[ep.episode_id], strict=True)
    ]


def test_operation_string():
    assert operation_string(GuiAction("type", (1, 1), "new york")) == "type new york"
    assert operation_string(GuiAction("click", (1, 1))) == "click"
    assert operation_string(GuiAction("scroll down")) == "scroll down"
    assert operation_string(GuiAction("recommendation", input_text="Yes")) == "recommendation Yes"


def test_outcome_from_response():
    got = outcomes()
    assert got[6].predicted is None and not got[6].format_valid
    assert got[7].predicted == GuiAction("pool_found", input_text="flights to Sydney")
    assert not got[7].format_valid
    assert got[7].intent_summary == "flights to Sydney"
    assert got[0].intent_summary is None  # not a pool step
    assert got[9].predicted.text == "No"  # "no." is read as No
    with pytest.raises(ValueError, match="not a step"):
        outcome_from_response(EP_B.steps[0], EP_A, RESPONSES["b"][0])


def test_outcome_rescales_the_models_point():
    # the model saw a 50 x 100 image: (25, 10) is (50, 20) on the stored 100 x 200 one
    text = answer(GuiAction("click", (25, 10)))
    got = outcome_from_response(EP_A.steps[1], EP_A, text, image_size=(50, 100))
    assert got.predicted.point == (50, 20)


def test_every_metric_on_a_hand_computed_example():
    m = evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], resamples=200)
    # EleAcc over gold click/type steps: a0 in the box (corner), a1 outside, b0 unparsable
    assert m["ele_acc"].value == pytest.approx(1 / 3) and m["ele_acc"].n == 3
    # Op F1 per step:
    # a0 [type new york city] vs [type new york]: P 3/4, R 1 -> 6/7
    # a1 click = click -> 1; a2 [scroll up] vs [scroll down] -> 1/2
    # a3 [poolfound new york hotels] vs [poolfound hotels in new york under 200]: P 1, R 4/7
    #    -> 8/11; a4 -> 1; a5 [recommendation yes] vs [recommendation no] -> 1/2
    # b0 unparsable -> 0; b1 [poolfound flights to sydney] vs [poolfound cheap flights to
    #    sydney]: P 1, R 4/5 -> 8/9; b2 -> 1; b3 -> 1/2
    op = (6 / 7 + 1 + 1 / 2 + 8 / 11 + 1 + 1 / 2 + 0 + 8 / 9 + 1 + 1 / 2) / 10
    assert m["op_f1"].value == pytest.approx(op) and m["op_f1"].n == 10
    # Step SR: a0 (in box, text F1 0.8), a3 (summary F1: P 1, R 1/2 -> 2/3), a4, b1 (summary
    # F1 6/7), b2 succeed; a1 (outside), a2 (wrong direction), a5, b0, b3 fail -> 5/10
    assert m["step_sr"].value == pytest.approx(0.5)
    assert m["step_sr_search"].value == pytest.approx(1 / 4)  # a0 of a0 a1 a2 b0
    assert m["step_sr_pool"].value == pytest.approx(1.0)  # a3, b1
    assert m["step_sr_recommend"].value == pytest.approx(2 / 4)  # a4, b2
    assert m["rec_acc"].value == pytest.approx(2 / 4) and m["rec_acc"].n == 4
    # said Yes on a4 (gold Yes) and a5 (gold No): precision 1/2
    assert m["yes_precision"].value == pytest.approx(1 / 2) and m["yes_precision"].n == 2
    # gold Yes on a4 (said Yes) and b3 (said No): recall 1/2
    assert m["yes_recall"].value == pytest.approx(1 / 2) and m["yes_recall"].n == 2
    # intent F1: a3 [new york hotels] vs [hotels in new york under 200 dollars]: P 1, R 3/7
    # -> 0.6; b1 [flights to sydney] vs [cheap flights to sydney]: P 1, R 3/4 -> 6/7
    assert m["intent_f1"].value == pytest.approx((0.6 + 6 / 7) / 2)
    assert m["format_valid"].value == pytest.approx(8 / 10)  # b0, b1 are not valid
    assert (m.n_steps, m.n_episodes) == (10, 2)
    assert "online_success" not in m
    assert "op_f1" not in m.wilson and "intent_f1" not in m.wilson  # not proportions
    assert m.wilson["format_valid"].low == pytest.approx(0.490, abs=5e-4)


def test_a_stricter_threshold_fails_partial_texts():
    m = evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], threshold=0.85, resamples=50)
    # a0's text F1 0.8 and a3's summary F1 2/3 now fall short; b1 (6/7 ~ 0.857) still passes
    assert m["step_sr"].value == pytest.approx(3 / 10)


def test_wilson_interval_known_values():
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_bootstrap_is_seeded_and_contains_the_value():
    sums, counts = [3, 0, 2, 5, 1], [4, 2, 2, 5, 3]
    first = cluster_bootstrap(sums, counts, resamples=500, seed=7)
    assert first == cluster_bootstrap(sums, counts, resamples=500, seed=7)
    assert first != cluster_bootstrap(sums, counts, resamples=500, seed=8)
    assert first[0] <= 11 / 16 <= first[1]
    assert all(math.isnan(v) for v in cluster_bootstrap([0, 0], [0, 0]))
    # one episode: every draw is that episode
    assert cluster_bootstrap([2], [4], resamples=20) == (0.5, 0.5)


def clustered_episodes() -> tuple[list[EpisodeRecord], list[StepOutcome]]:
    """10 episodes of 10 Yes candidates; the model says Yes all through 5 and No all through
    the other 5: 50 of 100 steps right, but only 10 independent units."""
    episodes, got = [], []
    for e in range(10):
        ep = episode(f"e{e}", "x", [pool(0, "x"), *(rec(i, "Yes") for i in range(1, 11))])
        episodes.append(ep)
        said = GuiAction("recommendation", input_text="Yes" if e < 5 else "No")
        got += [StepOutcome(ep.episode_id, s, said, True) for s in ep.stage_steps("recommend")]
    return episodes, got


def test_bootstrap_is_wider_than_wilson_when_steps_cluster():
    episodes, got = clustered_episodes()
    m = evaluate_outcomes(got, episodes=episodes, seed=3)
    boot, wilson = m["rec_acc"], m.wilson["rec_acc"]
    assert boot.value == wilson.value == pytest.approx(0.5)
    # Wilson over 100 steps: [0.404, 0.596]; over 10 episodes it is roughly [0.2, 0.8]
    assert wilson.low == pytest.approx(0.404, abs=1e-3)
    assert boot.high - boot.low > 2 * (wilson.high - wilson.low)
    again = evaluate_outcomes(got, episodes=episodes, seed=3)
    assert again["rec_acc"] == boot


def test_online_success():
    m = evaluate_outcomes(
        outcomes(), episodes=[EP_A, EP_B], online_success=[True, False, True, True], resamples=50
    )
    assert m["online_success"].value == 0.75 and m["online_success"].n == 4
    online = m.wilson["online_success"]
    assert (online.low, online.high) == wilson_interval(3, 4)


def test_as_dict_and_table_rows():
    flat = evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], resamples=50).as_dict()
    assert flat["espo/step_sr"] == pytest.approx(0.5)
    assert flat["espo/ele_acc_wilson_low"] == pytest.approx(wilson_interval(1, 3)[0])
    assert flat["espo/ele_acc_low"] <= flat["espo/ele_acc"] <= flat["espo/ele_acc_high"]
    assert flat["espo/n_steps"] == 10.0 and flat["espo/rec_acc_n"] == 4.0
    assert "espo/op_f1_wilson_low" not in flat
    assert all(isinstance(v, float) for v in flat.values())
    rows = evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], resamples=50).table_rows()
    assert rows[0]["metric"] == "ele_acc" and {r["method"] for r in rows[:2]} == {
        "bootstrap",
        "wilson",
    }


def labelled(episode_id: str, labels: list[str]) -> EpisodeRecord:
    return episode(episode_id, "x", [pool(0, "x"), *(rec(i + 1, y) for i, y in enumerate(labels))])


LABELLED = [
    labelled("e1", ["Yes", "No", "No"]),
    labelled("e2", ["No", "No", "Yes", "No"]),
    labelled("e3", ["Yes", "No"]),
]  # 9 recommend steps: 3 Yes, 6 No


def test_trivial_baselines_on_known_labels():
    b = trivial_baselines(LABELLED, seed=0, resamples=200)
    assert b["always_no"]["rec_acc"].value == pytest.approx(6 / 9)
    assert b["always_no"].wilson["rec_acc"].low == pytest.approx(wilson_interval(6, 9)[0])
    assert math.isnan(b["always_no"]["yes_precision"].value)  # never says Yes
    assert b["always_no"]["yes_recall"].value == 0.0
    assert b["always_yes"]["rec_acc"].value == pytest.approx(3 / 9)
    assert b["always_yes"]["yes_precision"].value == pytest.approx(3 / 9)
    assert b["always_yes"]["yes_recall"].value == 1.0
    # first item Yes: e1 all 3 right; e2 Y(no) N N N(yes): 2 right; e3 both right -> 7/9;
    # said Yes 3 times, right in e1 and e3 -> 2/3; gold Yes found in e1 and e3 -> 2/3
    assert b["first_item"]["rec_acc"].value == pytest.approx(7 / 9)
    assert b["first_item"]["yes_precision"].value == pytest.approx(2 / 3)
    assert b["first_item"]["yes_recall"].value == pytest.approx(2 / 3)
    assert set(b["first_item"].metrics) == {"rec_acc", "yes_precision", "yes_recall"}
    assert (b["first_item"].n_steps, b["first_item"].n_episodes) == (9, 3)
    # the coin: one draw per recommend step in episode order
    gold = np.array([1, 0, 0, 0, 0, 1, 0, 1, 0], dtype=bool)
    coin = np.random.default_rng(0).random(9) < 0.5
    assert b["random"]["rec_acc"].value == pytest.approx(np.mean(coin == gold))
    assert b["random"]["yes_recall"].value == pytest.approx(np.mean(coin[gold]))
    expected = b["random_expected"]
    assert expected["rec_acc"].value == 0.5 and expected["yes_recall"].value == 0.5
    assert expected["yes_precision"].value == pytest.approx(3 / 9)
    assert expected["rec_acc"].method == "expectation"


def test_markdown_table_has_every_row():
    results = {"espo": evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], resamples=50)}
    table = metrics_table_markdown(results, trivial_baselines([EP_A, EP_B], resamples=50))
    lines = table.splitlines()
    assert lines[0].startswith("| Model | EleAcc | Op F1 | Step SR | RecAcc |")
    espo = next(line for line in lines if line.startswith("| espo |"))
    cells = [c.strip() for c in espo.strip("|").split("|")]
    assert cells[1].startswith("33.3 [") and cells[3].startswith("50.0 [")
    assert cells[-1] == "10 / 2" and cells[-2] == "80.0"  # format valid 8/10
    for name in ("always_no", "always_yes", "first_item", "random", "random_expected"):
        row = next(line for line in lines if line.startswith(f"| {name} (trivial) |"))
        assert row.count("–") >= 4  # no GUI metrics for a label-only baseline
    expected = next(line for line in lines if line.startswith("| random_expected"))
    assert "| 50.0 |" in expected  # an expectation has no interval


def test_no_outcomes_give_undefined_metrics():
    m = evaluate_outcomes([], episodes=[EP_A])
    assert (m.n_steps, m.n_episodes) == (0, 0)
    assert math.isnan(m["step_sr"].value) and math.isnan(m.wilson["step_sr"].low)
    with pytest.raises(KeyError, match="unknown episode"):
        evaluate_outcomes(outcomes(), episodes=[EP_A])

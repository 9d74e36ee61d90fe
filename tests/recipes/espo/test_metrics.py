"""ESPO's metrics, intervals and trivial baselines on hand-built episodes, against values
worked by hand. EleAcc, Op F1 and Step SR are read over the GUI (search) steps; the all-steps
and text-F1 readings are named extras."""

from __future__ import annotations

import math

import numpy as np
import pytest

from odyssey_core.envs.persona.episode import EpisodeRecord, StepRecord
from odyssey_core.envs.persona.screen import Element, Screen
from odyssey_core.protocol.gui import GuiAction, format_gui_answer
from odyssey_core.recipes.espo.metrics import (
    BASELINE_AGENTS,
    LABELS,
    StepOutcome,
    baseline_outcomes,
    cluster_bootstrap,
    cluster_bootstrap_macro,
    evaluate_outcomes,
    metrics_table_markdown,
    operation_family,
    operation_string,
    outcome_from_response,
    step_success,
    texts_match,
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
    # the GUI steps are a0 a1 a2 (search) and b0; EleAcc over their gold click/type steps:
    # a0 in the box (corner), a1 outside, b0 unparsable
    assert m["ele_acc"].value == pytest.approx(1 / 3) and m["ele_acc"].n == 3
    # Op F1 per step:
    # a0 [type new york city] vs [type new york]: P 3/4, R 1 -> 6/7
    # a1 click = click -> 1; a2 [scroll up] vs [scroll down] -> 1/2; b0 unparsable -> 0
    # a3 [poolfound new york hotels] vs [poolfound hotels in new york under 200]: P 1, R 4/7
    #    -> 8/11; a4 -> 1; a5 [recommendation yes] vs [recommendation no] -> 1/2
    # b1 [poolfound flights to sydney] vs [poolfound cheap flights to sydney]: P 1, R 4/5
    #    -> 8/9; b2 -> 1; b3 -> 1/2
    assert m["op_f1"].value == pytest.approx((6 / 7 + 1 + 1 / 2 + 0) / 4) and m["op_f1"].n == 4
    every = (6 / 7 + 1 + 1 / 2 + 8 / 11 + 1 + 1 / 2 + 0 + 8 / 9 + 1 + 1 / 2) / 10
    assert m["op_f1_all_steps"].value == pytest.approx(every) and m["op_f1_all_steps"].n == 10
    # per gold action type: type a0; click a1, b0; scroll a2; no exit step
    assert m["op_f1_type"].value == pytest.approx(6 / 7) and m["op_f1_type"].n == 1
    assert m["op_f1_click"].value == pytest.approx(1 / 2) and m["op_f1_click"].n == 2
    assert m["op_f1_scroll"].value == pytest.approx(1 / 2)
    assert math.isnan(m["op_f1_exit"].value) and m["op_f1_exit"].n == 0
    assert m["op_f1_macro"].value == pytest.approx((6 / 7 + 1 / 2 + 1 / 2) / 3)
    assert m["op_f1_macro"].n == 4
    # Step SR (exact): a0's text "New York City" is not "new york", a1 is outside, a2 the
    # wrong direction, b0 unparsable -> 0 of 4; with the text at F1 >= 0.5, a0 (0.8) succeeds
    assert m["step_sr"].value == 0.0 and m["step_sr"].n == 4
    assert m["step_sr_text_f1"].value == pytest.approx(1 / 4)
    # all steps: a3 (summary F1: P 1, R 1/2 -> 2/3), a4, b1 (summary F1 6/7), b2 succeed; a5
    # and b3 say the wrong label -> 4/10
    assert m["step_sr_all_steps"].value == pytest.approx(4 / 10)
    assert m["step_sr_all_steps"].n == 10
    assert m["step_sr_search"].value == 0.0  # a0 a1 a2 b0
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
    for name in ("op_f1", "op_f1_macro", "op_f1_type", "op_f1_all_steps", "intent_f1"):
        assert name not in m.wilson  # not proportions
    assert m.wilson["format_valid"].low == pytest.approx(0.490, abs=5e-4)
    assert m.wilson["step_sr"].high == pytest.approx(wilson_interval(0, 4)[1])


EP_C = episode(
    "c",
    "hotels in new york",
    [
        step(0, "search", GuiAction("type", (50, 20), "new york"), "city"),
        step(1, "search", GuiAction("type", (50, 20), "new york"), "city"),
        step(2, "search", GuiAction("exit")),
        step(3, "search", GuiAction("scroll down")),
        step(4, "search", GuiAction("click", (30, 50)), "go"),
        pool(5, "hotels in new york"),
        rec(6, "No"),
    ],
)
RESPONSES_C = [
    answer(GuiAction("type", (11, 11), "  NEW York. ")),  # the same words once normalised
    answer(GuiAction("type", (50, 20), "New York City")),  # F1 0.8: not the operation
    answer(GuiAction("exit")),
    answer(GuiAction("scroll down")),
    answer(GuiAction("type", (30, 50), "go")),  # on the element, the wrong operation
    answer(GuiAction("pool_found", input_text="hotels in new york")),
    answer(GuiAction("recommendation", input_text="No")),
]


def test_step_sr_needs_the_exact_operation_and_the_element():
    got = [outcome_from_response(s, EP_C, t) for s, t in zip(EP_C.steps, RESPONSES_C, strict=True)]
    m = evaluate_outcomes(got, episodes=[EP_C], resamples=50)
    # c0 (normalised text equal), c2 (exit), c3 (scroll down) succeed; c1's text differs, c4
    # types where it should click -> 3 of the 5 GUI steps
    assert m["step_sr"].value == pytest.approx(3 / 5) and m["step_sr"].n == 5
    assert m["step_sr_text_f1"].value == pytest.approx(4 / 5)  # c1 too (F1 0.8)
    # EleAcc: c0, c1, c4 land in their boxes, whatever their type
    assert m["ele_acc"].value == 1.0 and m["ele_acc"].n == 3
    # Op F1: c0 1, c1 6/7, c2 1, c3 1, c4 [type go] vs [click] 0
    assert m["op_f1"].value == pytest.approx((3 + 6 / 7) / 5)
    assert m["op_f1_type"].value == pytest.approx((1 + 6 / 7) / 2)
    assert (m["op_f1_exit"].value, m["op_f1_scroll"].value, m["op_f1_click"].value) == (1, 1, 0)
    assert m["op_f1_macro"].value == pytest.approx(((1 + 6 / 7) / 2 + 1 + 1 + 0) / 4)
    assert m["step_sr_all_steps"].value == pytest.approx(5 / 7)  # + the pool and No steps


def test_texts_match_and_operation_family():
    assert texts_match("  NEW York. ", "new york") and texts_match("The Ritz", "ritz")
    assert not texts_match("New-York", "new york")  # the hyphen goes, the words join
    assert not texts_match("new york city", "new york")
    assert [operation_family(a) for a in ("click", "scroll left", "exit")] == [
        "click",
        "scroll",
        "exit",
    ]
    gold = EP_C.steps[0]
    near = GuiAction("type", (50, 20), "new york city")
    assert not step_success(gold, near) and step_success(gold, near, typed_text="f1")
    with pytest.raises(ValueError, match="typed_text"):
        step_success(gold, near, typed_text="fuzzy")


def test_an_agent_that_always_answers_no_has_no_gui_skill():
    no = GuiAction("recommendation", input_text="No")
    said = [StepOutcome(ep.episode_id, s, no, True) for ep in (EP_A, EP_B) for s in ep.steps]
    m = evaluate_outcomes(said, episodes=[EP_A, EP_B], resamples=50)
    assert (m["step_sr"].value, m["op_f1"].value, m["ele_acc"].value) == (0.0, 0.0, 0.0)
    assert m["op_f1_macro"].value == 0.0
    # the all-steps readings credit it the No steps: a5 and b2 right -> 2/10; Op F1: a4, b3
    # [recommendation no] vs [recommendation yes] 1/2, a5, b2 1, every other step 0 -> 3/10
    assert m["step_sr_all_steps"].value == pytest.approx(2 / 10)
    assert m["op_f1_all_steps"].value == pytest.approx(3 / 10)
    assert m["rec_acc"].value == pytest.approx(2 / 4)


def test_a_stricter_threshold_fails_partial_texts():
    m = evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], threshold=0.85, resamples=50)
    # a0's text F1 0.8 now falls short in the text-F1 reading; in all steps a3's summary F1
    # 2/3 does too, b1 (6/7 ~ 0.857) still passes -> b1, a4, b2
    assert m["step_sr_text_f1"].value == 0.0
    assert m["step_sr_all_steps"].value == pytest.approx(3 / 10)
    assert m["step_sr"].value == 0.0  # exact: the threshold does not enter


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


def test_macro_bootstrap():
    # one episode, two parts: every draw gives (1/2 + 3/3) / 2
    assert cluster_bootstrap_macro([([1], [2]), ([3], [3])], resamples=20) == (0.75, 0.75)
    # one part: the micro bootstrap, draw for draw
    sums, counts = [3, 0, 2, 5, 1], [4, 2, 2, 5, 3]
    one = cluster_bootstrap_macro([(sums, counts)], resamples=300, seed=4)
    assert one == pytest.approx(cluster_bootstrap(sums, counts, resamples=300, seed=4))
    # part A only in episode 0 (ratio 1), part B only in episode 1 (ratio 0): a draw of both
    # episodes averages 1/2, a draw of one episode twice has one part only, 1 or 0
    low, high = cluster_bootstrap_macro([([1, 0], [1, 0]), ([0, 0], [0, 1])], resamples=2000)
    assert (low, high) == (0.0, 1.0)
    assert all(math.isnan(v) for v in cluster_bootstrap_macro([([0], [0])]))


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
    assert flat["espo/step_sr"] == 0.0 and flat["espo/step_sr_n"] == 4.0
    assert flat["espo/step_sr_all_steps"] == pytest.approx(0.4)
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
    assert set(b) == {*BASELINE_AGENTS, "random_expected"}
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
    # every step answered: 3 pool steps + 9 recommend steps
    assert (b["first_item"].n_steps, b["first_item"].n_episodes) == (12, 3)
    # the coin: one draw per recommend step in episode order
    gold = np.array([1, 0, 0, 0, 0, 1, 0, 1, 0], dtype=bool)
    coin = np.random.default_rng(0).random(9) < 0.5
    assert b["random"]["rec_acc"].value == pytest.approx(np.mean(coin == gold))
    assert b["random"]["yes_recall"].value == pytest.approx(np.mean(coin[gold]))
    expected = b["random_expected"]
    assert expected["rec_acc"].value == 0.5 and expected["yes_recall"].value == 0.5
    assert expected["yes_precision"].value == pytest.approx(3 / 9)
    assert expected["rec_acc"].method == "expectation"
    assert b["oracle"]["rec_acc"].value == 1.0 and b["oracle"]["yes_precision"].value == 1.0


def test_every_baseline_is_measured_on_every_metric():
    b = trivial_baselines([EP_A, EP_B], resamples=100)
    for agent in BASELINE_AGENTS:
        assert set(b[agent].metrics) == set(LABELS) - {"online_success"}, agent
        assert (b[agent].n_steps, b[agent].n_episodes) == (10, 2)
        assert b[agent]["format_valid"].value == 1.0
    no = b["always_no"]
    assert (no["ele_acc"].value, no["op_f1"].value, no["step_sr"].value) == (0.0, 0.0, 0.0)
    assert no["step_sr_all_steps"].value == pytest.approx(2 / 10)  # a5, b2
    assert no["rec_acc"].value == pytest.approx(2 / 4) and no["intent_f1"].value == 0.0
    # first item: a4 Yes (right), a5 No (right), b2 Yes (wrong), b3 No (wrong)
    assert b["first_item"]["rec_acc"].value == pytest.approx(2 / 4)
    assert b["first_item"]["step_sr"].value == 0.0
    # the oracle answers the demonstration: the ceiling
    oracle = b["oracle"]
    for name in ("ele_acc", "op_f1", "step_sr", "rec_acc", "op_f1_macro", "step_sr_all_steps"):
        assert oracle[name].value == 1.0, name
    # its summaries against the true intents: a3 6 of 7 words (F1 12/13), b1 all of them
    assert oracle["intent_f1"].value == pytest.approx((12 / 13 + 1) / 2)


def test_the_random_baseline_is_seeded_and_answers_in_the_format():
    episodes = [EP_A, EP_B, EP_C]
    first = baseline_outcomes(episodes, "random", seed=5)
    assert first == baseline_outcomes(episodes, "random", seed=5)
    assert first != baseline_outcomes(episodes, "random", seed=6)
    assert [o.step for o in first] == [s for ep in episodes for s in ep.steps]
    for o in first:
        if o.step.stage == "search":
            assert o.predicted.action in ("click", "type", "exit") or "scroll" in o.predicted.action
            if o.predicted.spatial:
                assert 0 <= o.predicted.point[0] < W and 0 <= o.predicted.point[1] < H
        else:
            wanted = "pool_found" if o.step.stage == "pool" else "recommendation"
            assert o.predicted.action == wanted
    measured = evaluate_outcomes(first, episodes=episodes, seed=5, resamples=100)
    assert trivial_baselines(episodes, seed=5, resamples=100)["random"] == measured
    with pytest.raises(ValueError, match="unknown baseline agent"):
        baseline_outcomes(episodes, "always_maybe")


def test_markdown_table_has_every_row():
    results = {"espo": evaluate_outcomes(outcomes(), episodes=[EP_A, EP_B], resamples=50)}
    table = metrics_table_markdown(results, trivial_baselines([EP_A, EP_B], resamples=50))
    lines = table.splitlines()
    assert lines[0].startswith("| Model | EleAcc | Op F1 | Step SR | RecAcc |")
    espo = next(line for line in lines if line.startswith("| espo |"))
    cells = [c.strip() for c in espo.strip("|").split("|")]
    assert cells[1].startswith("33.3 [") and cells[3].startswith("0.0 [")
    assert cells[-1] == "10 / 2" and cells[-2] == "80.0"  # format valid 8/10
    for name in (*BASELINE_AGENTS, "random_expected"):
        rows = [line for line in lines if line.startswith(f"| {name} (baseline) |")]
        assert len(rows) == 2, name  # the headline table and the extras table
    no = next(line for line in lines if line.startswith("| always_no (baseline) |"))
    assert "| 0.0 [0.0, 0.0] | 0.0 [0.0, 0.0] | 0.0 [0.0, 0.0] |" in no
    expected = next(line for line in lines if line.startswith("| random_expected"))
    assert "| 50.0 |" in expected and expected.count("–") >= 3  # no GUI expectation
    extras = next(i for i, line in enumerate(lines) if "Step SR all steps" in line)
    espo_extras = next(line for line in lines[extras:] if line.startswith("| espo |"))
    assert "| 40.0 |" in espo_extras  # Step SR over all steps, 4/10


def test_no_outcomes_give_undefined_metrics():
    m = evaluate_outcomes([], episodes=[EP_A])
    assert (m.n_steps, m.n_episodes) == (0, 0)
    assert math.isnan(m["step_sr"].value) and math.isnan(m.wilson["step_sr"].low)
    assert math.isnan(m["op_f1_macro"].value) and math.isnan(m["op_f1_macro"].low)
    with pytest.raises(KeyError, match="unknown episode"):
        evaluate_outcomes(outcomes(), episodes=[EP_A])

"""The thought-collapse monitor on hand-made responses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from odyssey_core.eval.collapse import CollapseSettings, collapse_metrics, distinct_n


def answer(reasoning: str, buttons: str, perception: str = "a goomba ahead") -> str:
    return (
        f"<perception>{perception}</perception><reasoning>{reasoning}</reasoning>"
        f"<answer>{buttons}</answer>"
    )


def test_distinct_n_by_hand() -> None:
    # tokens: jump right now | jump right later -> unigrams 6, distinct 4 (jump right now later)
    assert distinct_n(["Jump right now", "jump, right later!"], 1) == pytest.approx(4 / 6)
    # bigrams: (jump right)(right now) | (jump right)(right later) -> 3 distinct of 4
    assert distinct_n(["Jump right now", "jump, right later!"], 2) == pytest.approx(3 / 4)
    assert math.isnan(distinct_n([], 1))


def test_collapse_metrics_by_hand() -> None:
    responses = [
        answer("I jump over the enemy to the right", "['a', 'right']"),  # agrees
        answer("I jump over the enemy to the right.", "['a', 'right']"),  # same words, frame 2
        answer("Keep moving right", "['b', 'right']"),  # no "run": disagrees
        answer("Wait here", "['jump']"),  # invalid answer
    ]
    frames = ["f1", "f2", "f3", "f3"]
    report = collapse_metrics(responses, frames)
    m = report.metrics
    assert m["turns"] == 4
    assert m["valid_rate"] == 0.75
    # turns 1 and 2 have the same normalised reasoning on different frames: 2 of 4 flagged
    assert m["duplicate_share"] == 0.5
    # judged: the 3 valid turns; turns 1, 2 agree (jump + right), turn 3 lacks "run"
    assert m["agreement"] == pytest.approx(2 / 3)
    # thought tokens: perception 3 words + reasoning 8, 8, 3, 2 -> (11 + 11 + 6 + 5) / 4
    assert m["thought_tokens"] == pytest.approx(33 / 4)
    # unigrams of the 4 reasonings: 8 + 8 + 3 + 2 = 21; distinct: i jump over the enemy to
    # right keep moving wait here = 11
    assert m["distinct_1"] == pytest.approx(11 / 21)
    warnings = report.warnings()
    assert any(w.startswith("valid_rate") for w in warnings)
    assert any(w.startswith("duplicate_share") for w in warnings)
    assert not any(w.startswith("agreement") for w in warnings)


def test_same_thought_on_the_same_frame_is_not_collapse() -> None:
    text = answer("jump right", "a, right")
    assert collapse_metrics([text, text], ["f", "f"]).metrics["duplicate_share"] == 0.0


def test_near_duplicates_use_token_jaccard_and_frames_can_be_arrays() -> None:
    base = "the pit is close so i jump right over it now and land on the ledge"
    near = base + " safely"  # 15 of 16 distinct tokens shared: jaccard 0.9375
    frames = [np.zeros((4, 4, 3), np.uint8), np.ones((4, 4, 3), np.uint8)]
    responses = [answer(base, "a"), answer(near, "a")]
    assert collapse_metrics(responses, frames).metrics["duplicate_share"] == 1.0
    strict = CollapseSettings(near_duplicate_jaccard=0.95)
    assert collapse_metrics(responses, frames, strict).metrics["duplicate_share"] == 0.0


def test_thresholds_in_settings_drive_warnings() -> None:
    responses = [answer(f"jump right {k}", "a, right") for k in range(4)]
    report = collapse_metrics(responses, [f"f{k}" for k in range(4)])
    assert not any(w.startswith("agreement") for w in report.warnings())
    picky = CollapseSettings(min_thought_tokens=50)
    assert any(
        w.startswith("thought_tokens")
        for w in collapse_metrics(responses, [f"f{k}" for k in range(4)], picky).warnings()
    )
    with pytest.raises(ValueError):
        collapse_metrics(responses, ["f"])

"""Inverse-trajectory-length auto-curriculum, weights worked by hand."""

from __future__ import annotations

from collections import Counter

import pytest

from odyssey_core.recipes.odysseus.curriculum import AutoCurriculum


def test_initial_weights_are_uniform() -> None:
    assert AutoCurriculum(["a", "b", "c", "d"]).weights() == pytest.approx(
        {"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25}
    )


def test_inverse_mean_length() -> None:
    # N_a = mean(5, 15) = 10, N_b = 40: scores 1/10 and 1/40, weights 0.1 / 0.125 = 0.8, 0.2.
    curriculum = AutoCurriculum(["a", "b"])
    curriculum.update({"a": [5, 15], "b": [40]})
    assert curriculum.weights() == pytest.approx({"a": 0.8, "b": 0.2}, abs=1e-12)
    assert curriculum.metrics()["curriculum/mean_length/a"] == 10.0


def test_absent_level_keeps_its_score() -> None:
    curriculum = AutoCurriculum(["a", "b", "c"])
    # c never seen keeps score 1: scores 0.1, 0.025, 1; sum 1.125.
    curriculum.update({"a": [10], "b": [40]})
    assert curriculum.weights() == pytest.approx(
        {"a": 0.1 / 1.125, "b": 0.025 / 1.125, "c": 1 / 1.125}, abs=1e-12
    )
    # Next batch has only a (length 20) and an empty list for c: b keeps 1/40, c keeps 1.
    # Scores 0.05, 0.025, 1; sum 1.075.
    curriculum.update({"a": [20], "c": []})
    assert curriculum.weights() == pytest.approx(
        {"a": 0.05 / 1.075, "b": 0.025 / 1.075, "c": 1 / 1.075}, abs=1e-12
    )


def test_floor_is_applied_after_normalising_then_renormalised() -> None:
    # N = 1, 99: p = 0.99, 0.01. Floor 0.1: q = 0.99, 0.1; w = 0.99 / 1.09, 0.1 / 1.09.
    curriculum = AutoCurriculum(["easy", "hard"], floor=0.1)
    curriculum.update({"easy": [1], "hard": [99]})
    assert curriculum.weights() == pytest.approx(
        {"easy": 0.99 / 1.09, "hard": 0.1 / 1.09}, abs=1e-12
    )
    # A floor below every p changes nothing: lengths 10, 40 still give 0.8 / 0.2.
    curriculum = AutoCurriculum(["a", "b"], floor=0.1)
    curriculum.update({"a": [10], "b": [40]})
    assert curriculum.weights() == pytest.approx({"a": 0.8, "b": 0.2}, abs=1e-12)


def test_bad_inputs() -> None:
    curriculum = AutoCurriculum(["a"])
    with pytest.raises(ValueError, match="unknown level"):
        curriculum.update({"z": [3]})
    with pytest.raises(ValueError, match="positive"):
        curriculum.update({"a": [0]})
    with pytest.raises(ValueError):
        AutoCurriculum(["a", "a"])


def test_sampling_is_deterministic_and_follows_the_weights() -> None:
    first, second = AutoCurriculum(["a", "b"], seed=3), AutoCurriculum(["a", "b"], seed=3)
    for c in (first, second):
        c.update({"a": [10], "b": [40]})
    draws = first.sample(20_000)
    assert draws == second.sample(20_000)
    counts = Counter(draws)
    # Binomial(20000, 0.8) has sd ~57; 0.01 * 20000 = 200 is > 3 sd.
    assert abs(counts["a"] / 20_000 - 0.8) < 0.01
    assert AutoCurriculum(["a", "b"], seed=4).sample(50) != AutoCurriculum(
        ["a", "b"], seed=3
    ).sample(50)


def test_state_round_trip_continues_the_same_sequence() -> None:
    original = AutoCurriculum(["a", "b", "c"], floor=0.05, seed=7)
    original.update({"a": [10, 30], "b": [5]})
    original.sample(13)  # advance the RNG
    state = original.state_dict()
    expected = original.sample(100)

    restored = AutoCurriculum(["a", "b", "c"], floor=0.05, seed=999)
    restored.load_state_dict(state)
    assert restored.weights() == original.weights()
    assert restored.sample(100) == expected
    with pytest.raises(ValueError):
        AutoCurriculum(["a", "b"]).load_state_dict(state)

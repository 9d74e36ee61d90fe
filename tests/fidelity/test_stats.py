"""The statistics behind every fidelity verdict, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from odyssey_core.fidelity.stats import (
    Verdict,
    combine,
    ema,
    improves,
    mean_se,
    ordering,
    seed_band,
    value_at,
)


def test_mean_se_is_the_standard_error_across_seeds() -> None:
    assert mean_se([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1 / math.sqrt(3)))
    assert mean_se([4.0]) == (4.0, 0.0)
    mean, se = mean_se([])
    assert math.isnan(mean) and math.isnan(se)
    assert mean_se([1.0, math.nan, 3.0]) == pytest.approx((2.0, 1.0))


def test_ema_smooths_like_tensorboard() -> None:
    assert ema([1.0, 2.0, 3.0], 0.5) == pytest.approx([1.0, 1.5, 2.25])
    # the paper's 0.85: s_1 = 0.85 * 0 + 0.15 * 1
    assert ema([0.0, 1.0]) == pytest.approx([0.0, 0.15])
    assert ema([], 0.9) == []
    with pytest.raises(ValueError, match="EMA weight"):
        ema([1.0], 1.0)


def test_seed_band_is_mean_and_se_on_a_common_grid() -> None:
    band = seed_band([([0, 10], [0, 10]), ([0, 5, 10], [2, 2, 2])], points=3, smooth=None)
    assert band.x == pytest.approx([0, 5, 10])
    assert band.mean == pytest.approx([1.0, 3.5, 6.0])
    # two seeds: se = |a - b| / 2
    assert band.se == pytest.approx([1.0, 1.5, 4.0])
    assert band.seeds == 2


def test_seed_band_never_extrapolates_a_seed() -> None:
    band = seed_band([([0, 10], [0, 10]), ([0, 4], [0, 4])], points=5, smooth=None)
    assert band.x[-1] == 4
    assert band.mean == pytest.approx(band.x)


def test_seed_band_smooths_each_run_before_averaging() -> None:
    band = seed_band([([0, 1], [0, 1])], points=2, smooth=0.5)
    assert band.mean == pytest.approx([0.0, 0.5])


def test_value_at_interpolates_and_holds_the_last_value() -> None:
    assert value_at([0, 10], [0, 20], 2.5) == pytest.approx(5.0)
    assert value_at([0, 10], [0, 20], 99) == pytest.approx(20.0)
    assert math.isnan(value_at([], [], 1.0))


def test_ordering_is_welch_one_sided() -> None:
    test = ordering("a", [3.0, 4.0, 5.0], "b", [0.0, 1.0, 2.0])
    # t = 3 / sqrt(1/3 + 1/3); Welch's df = 4 here
    assert test.t == pytest.approx(3 / math.sqrt(2 / 3))
    assert test.p_greater == pytest.approx(0.010656, abs=1e-5)
    assert test.verdict is Verdict.HOLDS
    assert test.claim == "a > b"
    assert "4 ± 0.577 vs 1 ± 0.577" in test.measurement()
    assert ordering("b", [0.0, 1.0, 2.0], "a", [3.0, 4.0, 5.0]).verdict is Verdict.DOES_NOT_HOLD


def test_ordering_inside_the_noise_cannot_tell() -> None:
    test = ordering("a", [1.0, 2.0, 3.0], "b", [1.5, 2.5, 2.0])
    assert test.t == pytest.approx(0.0)
    assert test.verdict is Verdict.CANNOT_TELL
    assert ordering("a", [1.0, 2.0, 3.0], "b", [1.5, 2.5, 2.0], ">=").verdict is Verdict.CANNOT_TELL


def test_ordering_of_constants_and_of_one_seed() -> None:
    # both at the floor on every seed: no power, not evidence against the claim
    assert ordering("a", [0.0, 0.0], "b", [0.0, 0.0], ">").verdict is Verdict.CANNOT_TELL
    assert ordering("a", [1.0, 1.0], "b", [1.0, 1.0], ">=").verdict is Verdict.HOLDS
    assert ordering("a", [2.0, 2.0], "b", [1.0, 1.0]).verdict is Verdict.HOLDS
    assert ordering("a", [5.0], "b", [0.0, 1.0]).verdict is Verdict.CANNOT_TELL
    with pytest.raises(ValueError, match="relation"):
        ordering("a", [1.0], "b", [1.0], "<")


def test_improves_compares_after_with_before() -> None:
    test = improves("m", before=[0.0, 1.0, 2.0], after=[3.0, 4.0, 5.0])
    assert test.claim == "m after > m before"
    assert test.verdict is Verdict.HOLDS


def test_combine_fails_on_any_failure_and_holds_only_when_all_hold() -> None:
    h, n, c = Verdict.HOLDS, Verdict.DOES_NOT_HOLD, Verdict.CANNOT_TELL
    assert combine([h, h]) is h
    assert combine([h, c]) is c
    assert combine([h, c, n]) is n
    assert combine([]) is c


def test_ordering_treats_rounding_noise_as_constant() -> None:
    # 0.1 + 0.2 != 0.3 in floating point: the spread is rounding, not seeds
    a, b = [0.1 + 0.2, 0.3], [0.3, 0.3]
    assert ordering("a", a, "b", b, ">").verdict is Verdict.CANNOT_TELL
    assert ordering("a", a, "b", b, ">=").verdict is Verdict.HOLDS

"""Statistics of a fidelity comparison: curves over training seeds and the verdict on a claim.

Every comparison trains each method from several training seeds. A method's number is the mean
over seeds with the standard error across seeds (the spread a new seed would show, not the
evaluation noise of one run), and a paper's ordering "A > B" is judged on those per-seed numbers
with Welch's t-test (unequal variances):

    t = (mean_A - mean_B) / sqrt(se_A^2 + se_B^2)

one-sided at ``alpha`` each way. A significant gap in the claimed direction is "holds", one
against it is "does not hold", anything else is "cannot tell at this power".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from odyssey_core.eval.stats import mean_se as mean_se_of_all

EMA_WEIGHT = 0.85  # Odysseus Fig. 4: curves smoothed with an exponential moving average of 0.85


class Verdict(StrEnum):
    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    CANNOT_TELL = "cannot tell at this power"


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the finite values (a failed seed's nan is left out)."""
    return mean_se_of_all([v for v in values if math.isfinite(v)])


def format_mean_se(values: Sequence[float], digits: int = 3, scale: float = 1.0) -> str:
    """``mean ± s.e.`` of the finite values, both times ``scale`` (100: percent); "n/a" for none."""
    mean, se = mean_se(values)
    if not math.isfinite(mean):
        return "n/a"
    return f"{scale * mean:.{digits}f} ± {scale * se:.{digits}f}"


def ema(values: Sequence[float], weight: float = EMA_WEIGHT) -> list[float]:
    """TensorBoard-style smoothing, s_0 = x_0 and s_t = weight * s_(t-1) + (1 - weight) * x_t."""
    if not 0 <= weight < 1:
        raise ValueError(f"EMA weight must be in [0, 1), got {weight}")
    out: list[float] = []
    for x in values:
        out.append(float(x) if not out else weight * out[-1] + (1 - weight) * float(x))
    return out


@dataclass(frozen=True)
class Band:
    """A curve over seeds on a common x grid: mean +- standard error at every point."""

    x: list[float]
    mean: list[float]
    se: list[float]
    seeds: int


def seed_band(
    runs: Sequence[tuple[Sequence[float], Sequence[float]]],
    points: int = 50,
    smooth: float | None = EMA_WEIGHT,
) -> Band:
    """Each run's ``(x, y)`` curve smoothed with :func:`ema`, interpolated linearly onto a grid
    of ``points`` x values up to the shortest run's end (no seed is extrapolated), then mean
    and standard error across the runs at every grid point."""
    runs = [(list(map(float, x)), list(map(float, y))) for x, y in runs if len(x)]
    if not runs:
        return Band([], [], [], 0)
    for x, y in runs:
        if len(x) != len(y):
            raise ValueError(f"a curve has {len(x)} x values and {len(y)} y values")
    start = max(x[0] for x, _ in runs)
    end = min(x[-1] for x, _ in runs)
    grid = np.linspace(start, end, points) if end > start else np.asarray([end])
    columns = []
    for x, y in runs:
        ys = ema(y, smooth) if smooth is not None else y
        columns.append(np.interp(grid, x, ys))
    stacked = np.vstack(columns)
    stats = [mean_se(stacked[:, i].tolist()) for i in range(stacked.shape[1])]
    return Band(grid.tolist(), [m for m, _ in stats], [s for _, s in stats], len(runs))


def value_at(x: Sequence[float], y: Sequence[float], at: float) -> float:
    """``y`` at ``at`` by linear interpolation (the last value past the end)."""
    if not len(x):
        return math.nan
    return float(np.interp(at, np.asarray(x, float), np.asarray(y, float)))


@dataclass(frozen=True)
class OrderingTest:
    """Is A above B (or at least B), across training seeds?"""

    a: str
    b: str
    relation: str  # ">" or ">="
    mean_a: float
    se_a: float
    mean_b: float
    se_b: float
    t: float
    p_greater: float  # one-sided p of "A > B"
    p_less: float  # one-sided p of "A < B"
    verdict: Verdict

    @property
    def claim(self) -> str:
        return f"{self.a} {self.relation} {self.b}"

    def measurement(self, digits: int = 3) -> str:
        def num(v: float) -> str:
            return f"{v:.{digits}g}" if math.isfinite(v) else "n/a"

        return (
            f"{num(self.mean_a)} ± {num(self.se_a)} vs {num(self.mean_b)} ± {num(self.se_b)}"
            f" (t {num(self.t)}, p(>) {num(self.p_greater)})"
        )


def _flat(se_a: float, se_b: float, mean_a: float, mean_b: float) -> bool:
    """Both samples constant, to rounding: a t statistic would divide by float noise."""
    tolerance = 1e-9 * max(1.0, abs(mean_a), abs(mean_b))
    return se_a <= tolerance and se_b <= tolerance


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t and its one-sided p values (greater, less); nan when it is undefined."""
    from scipy import stats

    a = [v for v in a if math.isfinite(v)]
    b = [v for v in b if math.isfinite(v)]
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan, math.nan
    mean_a, se_a = mean_se(a)
    mean_b, se_b = mean_se(b)
    if _flat(se_a, se_b, mean_a, mean_b):
        # constant samples: the difference is exact, so a difference is certain either way
        diff = mean_a - mean_b
        if math.isclose(mean_a, mean_b):
            return 0.0, 0.5, 0.5
        return math.copysign(math.inf, diff), float(diff <= 0), float(diff >= 0)
    result = stats.ttest_ind(a, b, equal_var=False)
    t = float(result.statistic)
    two_sided = float(result.pvalue)
    p_greater = two_sided / 2 if t > 0 else 1 - two_sided / 2
    return t, p_greater, 1 - p_greater


def ordering(
    name_a: str,
    a: Sequence[float],
    name_b: str,
    b: Sequence[float],
    relation: str = ">",
    alpha: float = 0.05,
) -> OrderingTest:
    """Test the claim ``A relation B`` on per-seed numbers (see the module docstring).

    ``>``: holds when A is significantly above B, does not hold when A is significantly below.
    Two identical constants (every seed of both at 0, say) cannot tell: a measure that does not
    vary, usually a floor, has no power to show a gap. ``>=``: does not hold only when A is
    significantly below B; A significantly above, or identical constants, hold, and a gap inside
    the noise cannot tell. Fewer than two seeds on either side cannot tell."""
    if relation not in (">", ">="):
        raise ValueError(f"relation must be '>' or '>=', got {relation!r}")
    mean_a, se_a = mean_se(a)
    mean_b, se_b = mean_se(b)
    t, p_greater, p_less = _welch(a, b)
    if not math.isfinite(p_greater):
        verdict = Verdict.CANNOT_TELL
    elif p_greater < alpha:
        verdict = Verdict.HOLDS
    elif p_less < alpha:
        verdict = Verdict.DOES_NOT_HOLD
    elif _flat(se_a, se_b, mean_a, mean_b) and math.isclose(mean_a, mean_b) and relation == ">=":
        verdict = Verdict.HOLDS  # identical constants: exactly equal satisfies A >= B
    else:
        verdict = Verdict.CANNOT_TELL
    return OrderingTest(
        name_a, name_b, relation, mean_a, se_a, mean_b, se_b, t, p_greater, p_less, verdict
    )


def improves(
    name: str, before: Sequence[float], after: Sequence[float], alpha: float = 0.05
) -> OrderingTest:
    """Training improves ``name``: its per-seed final numbers are above its per-seed start."""
    return ordering(f"{name} after", after, f"{name} before", before, ">", alpha)


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """A claim made of several orderings: it fails if any part fails, holds if all hold."""
    if any(v is Verdict.DOES_NOT_HOLD for v in verdicts):
        return Verdict.DOES_NOT_HOLD
    if verdicts and all(v is Verdict.HOLDS for v in verdicts):
        return Verdict.HOLDS
    return Verdict.CANNOT_TELL

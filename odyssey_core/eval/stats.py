"""Summary statistics of evaluation episodes, laid out like the paper's Table 2.

Definitions (kept in one place so the report and the tests agree):

* per level: ``mean`` of the final progress over the ``n`` finished episodes and its standard
  error ``se = s / sqrt(n)`` with ``s`` the sample standard deviation (``ddof=1``); ``se`` is
  0 for a single episode and NaN for none. Errored episodes (a crashed env) are left out of
  ``n`` and counted in ``errors`` instead: a crash says nothing about the agent.
* average over levels: the unweighted mean of the ``K`` level means (every level counts the
  same, whatever its ``n``), with ``se = sqrt(sum_k se_k^2) / K``: the standard error of a
  mean of independent level means.
* relative improvement of agent A over a base B: ``(mean_A - mean_B) / mean_B`` (NaN when the
  base mean is 0); Figure 6 of the paper reports it per level and on average.
* success: the episode reached the goal. An episode cut by the turn limit is never a success.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

__all__ = [
    "LevelStats",
    "TableStats",
    "average_over_levels",
    "level_stats",
    "mean_se",
    "relative_improvement",
    "wilson_interval",
]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n)); (nan, nan) for no values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, 0.0
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance) / math.sqrt(n)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``successes / n``; (nan, nan) when ``n`` is 0."""
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / shrink
    # at 0 / n and n / n the bound is exactly 0 / 1; floating point would leave ~1e-17
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class LevelStats:
    """One cell of the table: an agent on a level."""

    level: str
    n: int  # finished episodes (errors excluded)
    mean: float
    se: float
    errors: int = 0
    successes: int = 0
    truncated: int = 0
    deaths: int = 0
    gained_mean: float = math.nan  # progress gained since the start state (curated states)
    gained_se: float = math.nan
    max_progress: float | None = None

    @property
    def success_rate(self) -> float:
        return self.successes / self.n if self.n else math.nan

    def as_dict(self) -> dict[str, float]:
        out = {k: float(v) for k, v in asdict(self).items() if k != "level" and v is not None}
        out["success_rate"] = self.success_rate
        return out


def level_stats(
    level: str,
    progress: Sequence[float],
    *,
    gained: Sequence[float] | None = None,
    errors: int = 0,
    successes: int = 0,
    truncated: int = 0,
    deaths: int = 0,
    max_progress: float | None = None,
) -> LevelStats:
    """Stats of one level from the final progress of its finished episodes."""
    mean, se = mean_se(list(progress))
    g_mean, g_se = mean_se(list(gained)) if gained is not None else (math.nan, math.nan)
    return LevelStats(
        level=level,
        n=len(progress),
        mean=mean,
        se=se,
        errors=errors,
        successes=successes,
        truncated=truncated,
        deaths=deaths,
        gained_mean=g_mean,
        gained_se=g_se,
        max_progress=max_progress,
    )


def average_over_levels(cells: Iterable[LevelStats]) -> tuple[float, float]:
    """Mean of the level means and ``sqrt(sum se_k^2) / K``; levels without episodes are
    skipped (NaN if none is left)."""
    usable = [c for c in cells if c.n > 0]
    if not usable:
        return math.nan, math.nan
    k = len(usable)
    mean = math.fsum(c.mean for c in usable) / k
    se = math.sqrt(math.fsum(c.se**2 for c in usable)) / k
    return mean, se


def relative_improvement(value: float, base: float) -> float:
    """``(value - base) / base``; NaN when the base is 0 or either is NaN."""
    if math.isnan(value) or math.isnan(base) or base == 0:
        return math.nan
    return (value - base) / base


@dataclass
class TableStats:
    """One table of the report: rows are agents, columns are levels plus the average."""

    title: str
    levels: list[str]
    rows: dict[str, dict[str, LevelStats]] = field(default_factory=dict)  # agent -> level -> cell
    max_progress: dict[str, float | None] = field(default_factory=dict)
    base_agent: str | None = None
    note: str = ""

    def average(self, agent: str) -> tuple[float, float]:
        return average_over_levels(
            self.rows[agent].get(level) or _empty(level) for level in self.levels
        )

    def max_average(self) -> float:
        known = [v for v in (self.max_progress.get(level) for level in self.levels) if v]
        return (
            math.fsum(known) / len(known) if len(known) == len(self.levels) and known else math.nan
        )

    def improvement(self, agent: str, level: str | None = None) -> float:
        """Relative improvement of ``agent`` over the base agent, on a level or on average."""
        if self.base_agent is None or self.base_agent not in self.rows:
            return math.nan
        if level is None:
            return relative_improvement(self.average(agent)[0], self.average(self.base_agent)[0])
        mine = self.rows[agent].get(level)
        base = self.rows[self.base_agent].get(level)
        if mine is None or base is None:
            return math.nan
        return relative_improvement(mine.mean, base.mean)

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """A flat dict for loggers: ``{prefix}{agent}/{level}/mean`` ... and ``/average/...``."""
        flat: dict[str, float] = {}
        for agent, cells in self.rows.items():
            for level, cell in cells.items():
                for key, value in cell.as_dict().items():
                    flat[f"{prefix}{agent}/{level}/{key}"] = value
            mean, se = self.average(agent)
            flat[f"{prefix}{agent}/average/mean"] = mean
            flat[f"{prefix}{agent}/average/se"] = se
            if self.base_agent and agent != self.base_agent:
                flat[f"{prefix}{agent}/average/rel_improvement"] = self.improvement(agent)
        return flat


def _empty(level: str) -> LevelStats:
    return LevelStats(level=level, n=0, mean=math.nan, se=math.nan)


def table_from_cells(
    title: str,
    cells: Mapping[str, Mapping[str, LevelStats]],
    *,
    levels: Sequence[str] | None = None,
    base_agent: str | None = None,
    note: str = "",
) -> TableStats:
    """Build a :class:`TableStats` from ``agent -> level -> cell``."""
    order = list(levels) if levels is not None else sorted({lv for c in cells.values() for lv in c})
    maxima: dict[str, float | None] = {}
    for level in order:
        known = [c[level].max_progress for c in cells.values() if level in c]
        maxima[level] = next((m for m in known if m is not None), None)
    return TableStats(
        title=title,
        levels=order,
        rows={agent: dict(c) for agent, c in cells.items()},
        max_progress=maxima,
        base_agent=base_agent,
        note=note,
    )

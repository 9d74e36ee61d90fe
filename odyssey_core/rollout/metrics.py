"""Rollout metrics, per level and overall, computed from a TurnBatch's per-turn extras.

Everything is derived from the batch itself (rewards, dones and the ``extras`` the collector
writes), so the same numbers can be recomputed later from a saved batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from odyssey_core.rollout.batch import TurnBatch

__all__ = ["OVERALL", "LevelMetrics", "RolloutMetrics"]

#: the key prefix of the metrics over all levels together
OVERALL = "all"


@dataclass(frozen=True)
class LevelMetrics:
    """Statistics of the episodes (and their turns) of one level, or of all levels."""

    episodes: int
    turns: int
    length_mean: float  # turns per episode
    return_mean: float  # summed reward per episode
    progress_mean: float  # progress at each episode's last turn
    progress_best: float  # the best final progress among the episodes
    max_progress: float | None  # the level's goal progress, when the game knows it
    progress_frac_mean: float | None  # final progress / max_progress, where known
    invalid_rate: float  # share of turns whose answer could not be used (env fell back)
    response_tokens_mean: float  # response length in tokens, per turn
    length_finish_rate: float  # share of responses cut by max_new_tokens
    goal_rate: float  # share of episodes that reached the goal
    death_rate: float  # share of episodes that ended by losing a life

    def as_dict(self) -> dict[str, float]:
        """Numeric fields as floats; unknown (None) ones are left out."""
        return {k: float(v) for k, v in asdict(self).items() if v is not None}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _summarise(episodes: list[dict[str, Any]], turns: list[dict[str, Any]]) -> LevelMetrics:
    maxima = {e["max_progress"] for e in episodes}
    known = [e["progress"] / e["max_progress"] for e in episodes if e["max_progress"]]
    return LevelMetrics(
        episodes=len(episodes),
        turns=len(turns),
        length_mean=_mean([e["length"] for e in episodes]),
        return_mean=_mean([e["return"] for e in episodes]),
        progress_mean=_mean([e["progress"] for e in episodes]),
        progress_best=max((e["progress"] for e in episodes), default=math.nan),
        # one goal progress only when every episode agrees (a single level)
        max_progress=float(maxima.pop()) if len(maxima) == 1 and None not in maxima else None,
        progress_frac_mean=_mean(known) if known else None,
        invalid_rate=_mean([float(bool(t.get("invalid_action", False))) for t in turns]),
        response_tokens_mean=_mean([float(t.get("response_tokens", 0)) for t in turns]),
        length_finish_rate=_mean([float(t.get("finish_reason") == "length") for t in turns]),
        goal_rate=_mean([float(e["goal"]) for e in episodes]),
        death_rate=_mean([float(e["death"]) for e in episodes]),
    )


@dataclass
class RolloutMetrics:
    """Metrics of one collection: ``per_level[level_id]``, ``overall`` and wall-clock timings."""

    per_level: dict[str, LevelMetrics]
    overall: LevelMetrics
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_batch(
        cls, batch: TurnBatch, timings: Mapping[str, float] | None = None
    ) -> RolloutMetrics:
        """Summarise the episodes of ``batch`` (each episode's level is its first turn's)."""
        by_level: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        all_episodes: list[dict[str, Any]] = []
        for part in batch.episode_slices():
            extras = batch.extras[part]
            last = extras[-1]
            episode = {
                "length": part.stop - part.start,
                "return": float(batch.rewards[part].sum()),
                "progress": float(last.get("progress", 0.0)),
                "max_progress": last.get("max_progress"),
                "goal": bool(last.get("goal_reached", False)),
                "death": bool(last.get("life_lost", False)),
            }
            episodes, turns = by_level.setdefault(batch.levels[part.start], ([], []))
            episodes.append(episode)
            turns.extend(extras)
            all_episodes.append(episode)
        per_level = {
            level: _summarise(episodes, turns)
            for level, (episodes, turns) in sorted(by_level.items())
        }
        return cls(
            per_level=per_level,
            overall=_summarise(all_episodes, list(batch.extras)),
            timings=dict(timings or {}),
        )

    def as_dict(self) -> dict[str, float]:
        """A flat dict for loggers: ``"odland-1-1/progress_mean"``, ``"all/goal_rate"``,
        ``"time/generate_s"`` ..."""
        flat: dict[str, float] = {}
        for level, metrics in self.per_level.items():
            flat.update({f"{level}/{k}": v for k, v in metrics.as_dict().items()})
        flat.update({f"{OVERALL}/{k}": v for k, v in self.overall.as_dict().items()})
        flat.update({f"time/{k}": float(v) for k, v in self.timings.items()})
        return flat

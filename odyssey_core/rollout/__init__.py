"""Rollouts: play a policy in vector environments and gather complete episodes as a TurnBatch."""

from odyssey_core.rollout.collector import (
    LevelSampler,
    RolloutCollector,
    VectorEnvLike,
    episode_seed,
    split_level,
)
from odyssey_core.rollout.metrics import OVERALL, LevelMetrics, RolloutMetrics

__all__ = [
    "OVERALL",
    "LevelMetrics",
    "LevelSampler",
    "RolloutCollector",
    "RolloutMetrics",
    "VectorEnvLike",
    "episode_seed",
    "split_level",
]

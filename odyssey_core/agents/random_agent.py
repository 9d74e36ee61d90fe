"""Uniformly random legal actions: the floor of every evaluation table."""

from __future__ import annotations

from typing import Any

import numpy as np

from odyssey_core.agents.base import Agent
from odyssey_core.envs.base import Observation, TurnEnv


class RandomAgent(Agent):
    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def reset(self, env: TurnEnv, seed: int | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)

    def act(self, env: TurnEnv, observation: Observation, info: dict[str, Any]) -> tuple[str, ...]:
        actions = env.legal_actions  # type: ignore[attr-defined]
        return actions[int(self._rng.integers(len(actions)))]

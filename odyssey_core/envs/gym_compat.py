"""Gymnasium view of an Odyssey environment: dict observations that Gymnasium spaces can check."""

from __future__ import annotations

import string
from typing import Any

import gymnasium
import numpy as np

from odyssey_core.envs.base import Observation, TurnEnv

_TEXT_CHARSET = string.printable


class DictObservation(gymnasium.ObservationWrapper):
    """``Observation(image, text)`` -> ``{"image": uint8[H, W, 3], "text": str}``."""

    def __init__(self, env: TurnEnv) -> None:
        super().__init__(env)
        image_space = env.observation_space
        assert isinstance(image_space, gymnasium.spaces.Box)
        self.observation_space = gymnasium.spaces.Dict(
            {
                "image": image_space,
                "text": gymnasium.spaces.Text(max_length=4096, charset=_TEXT_CHARSET),
            }
        )

    def observation(self, observation: Observation) -> dict[str, Any]:
        return {"image": np.asarray(observation.image), "text": observation.text}


def make_gym_env(env_name: str, **kwargs: Any) -> gymnasium.Env:
    from odyssey_core.envs.registry import make_env

    return DictObservation(make_env(env_name, **kwargs))

"""Turn-based environments, their registry and their Gymnasium registration.

>>> from odyssey_core.envs import make_env
>>> env = make_env("odland-1-1", max_turns=80)
>>> import gymnasium, odyssey_core.envs
>>> env = gymnasium.make("odyssey/odland-1-1")
"""

from odyssey_core.envs.base import Observation, StepResult, TurnEnv
from odyssey_core.envs.registry import ENVIRONMENTS, list_envs, make_env, register_env
from odyssey_core.envs.spec import EnvSpec

__all__ = [
    "ENVIRONMENTS",
    "EnvSpec",
    "Observation",
    "StepResult",
    "TurnEnv",
    "list_envs",
    "make_env",
    "register_env",
]

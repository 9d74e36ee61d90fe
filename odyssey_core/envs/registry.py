"""The environment registry: every environment has a name such as ``odland-1-1``.

The built-in environments are data: each env package lists its :class:`EnvSpec` entries in
its own ``specs.py`` (``PYBOY_ENVS``, ``CARDS_ENVS``, ``ALFWORLD_ENVS``), which imports nothing
from this module; this module reads those tables and registers them. Registering a name
imports nothing heavy; the emulator (or alfworld) loads when an environment is made. The same
names are registered with Gymnasium under the ``odyssey/`` namespace.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from odyssey_core.common.registry import Registry, import_object
from odyssey_core.envs.alfworld.specs import ALFWORLD_ENVS
from odyssey_core.envs.base import TurnEnv
from odyssey_core.envs.cards.specs import CARDS_ENVS
from odyssey_core.envs.pyboy.specs import PYBOY_ENVS
from odyssey_core.envs.spec import EnvSpec

__all__ = [
    "BUILTIN_ENVS",
    "ENVIRONMENTS",
    "GYM_NAMESPACE",
    "EnvSpec",
    "list_envs",
    "make_env",
    "register_env",
]

GYM_NAMESPACE = "odyssey"

#: every built-in environment, in registration order
BUILTIN_ENVS: tuple[EnvSpec, ...] = (*PYBOY_ENVS, *CARDS_ENVS, *ALFWORLD_ENVS)

ENVIRONMENTS: Registry[EnvSpec] = Registry("environment")


def register_env(spec: EnvSpec, *, gym: bool = True) -> EnvSpec:
    """Add ``spec`` to :data:`ENVIRONMENTS` (and to Gymnasium as ``odyssey/<name>``)."""
    ENVIRONMENTS.register(spec.name, spec)
    if gym:
        gymnasium.register(
            id=f"{GYM_NAMESPACE}/{spec.name}",
            entry_point="odyssey_core.envs.gym_compat:make_gym_env",
            kwargs={"env_name": spec.name},
        )
    return spec


def make_env(name: str, **overrides: Any) -> TurnEnv:
    """Build the environment registered as ``name``; ``overrides`` replace its defaults."""
    spec = ENVIRONMENTS.get(name)
    factory = import_object(spec.entry_point)
    return factory(**{**spec.kwargs, **overrides})


def list_envs() -> list[EnvSpec]:
    return [ENVIRONMENTS.get(name) for name in ENVIRONMENTS.names()]


for _spec in BUILTIN_ENVS:
    register_env(_spec)
del _spec

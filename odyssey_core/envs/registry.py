"""The environment registry: every environment has a name such as ``odland-1-1``.

Registering a name imports nothing heavy; the emulator loads when an environment is made.
The same names are registered with Gymnasium under the ``odyssey/`` namespace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium

from odyssey_core.common.registry import Registry, import_object
from odyssey_core.envs.base import TurnEnv

GYM_NAMESPACE = "odyssey"


@dataclass(frozen=True)
class EnvSpec:
    name: str
    entry_point: str  # "module:factory"
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""


ENVIRONMENTS: Registry[EnvSpec] = Registry("environment")


def register_env(spec: EnvSpec, *, gym: bool = True) -> EnvSpec:
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


def _register_builtin() -> None:
    from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS

    for game, levels, what in (
        ("odland", ODLAND_LEVELS, "odland (open, packaged ROM)"),
        ("mario", MARIO_LEVELS, "Super Mario Land (your ROM via ODYSSEY_SML_ROM)"),
    ):
        for level in levels:
            register_env(
                EnvSpec(
                    name=f"{game}-{level}",
                    entry_point="odyssey_core.envs.pyboy.factory:make_gameboy_env",
                    kwargs={"game": game, "level": level},
                    description=f"{what} level {level}",
                )
            )

    from odyssey_core.envs.cards import register_cards_envs

    register_cards_envs()

    from odyssey_core.envs.alfworld import register_alfworld_envs

    register_alfworld_envs()  # imports nothing from alfworld until an env is made


_register_builtin()

"""The environment registry: every environment has a name such as ``odland-1-1``.

The built-in environments are data: each env package lists its :class:`EnvSpec` entries in
its own ``specs.py`` (``PYBOY_ENVS``, ``CARDS_ENVS``, ``ALFWORLD_ENVS``), which imports nothing
from this module; this module reads those tables and registers them. Registering a name
imports nothing heavy; the emulator (or alfworld) loads when an environment is made. The same
names are registered with Gymnasium under the ``odyssey/`` namespace.

Gymnasium without importing Odyssey first: the package declares the entry point
``odyssey = "odyssey_core.envs.registry:register_gym_envs"`` in the ``gymnasium.envs`` group
(Gymnasium's plugin convention: the entry point's name is the namespace, the object is a
function that registers the envs). Gymnasium 1.x no longer runs that group by itself; there the
module-qualified id does the same in a fresh process:
``gymnasium.make("odyssey_core.envs:odyssey/odland-1-1")``.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from odyssey_core.common.registry import Registry, import_object
from odyssey_core.envs.alfworld.specs import ALFWORLD_ENVS
from odyssey_core.envs.base import TurnEnv
from odyssey_core.envs.cards.specs import CARDS_ENVS
from odyssey_core.envs.persona.specs import PERSONA_ENVS
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
    "register_gym_envs",
]

GYM_NAMESPACE = "odyssey"

#: every built-in environment, in registration order
BUILTIN_ENVS: tuple[EnvSpec, ...] = (*PYBOY_ENVS, *CARDS_ENVS, *ALFWORLD_ENVS, *PERSONA_ENVS)

ENVIRONMENTS: Registry[EnvSpec] = Registry("environment")


def register_env(spec: EnvSpec, *, gym: bool = True) -> EnvSpec:
    """Add ``spec`` to :data:`ENVIRONMENTS` (and to Gymnasium as ``odyssey/<name>``)."""
    ENVIRONMENTS.register(spec.name, spec)
    if gym:
        _gym_register(spec)
    return spec


def _gym_register(spec: EnvSpec) -> None:
    gymnasium.register(
        id=f"{GYM_NAMESPACE}/{spec.name}",
        entry_point="odyssey_core.envs.gym_compat:make_gym_env",
        kwargs={"env_name": spec.name},
    )


def register_gym_envs() -> list[str]:
    """Register every environment of :data:`ENVIRONMENTS` with Gymnasium; the plugin hook.

    Idempotent (an id already registered is left alone, so Gymnasium warns about no
    override), and safe under Gymnasium's plugin loader, which wraps the call in
    ``gymnasium.envs.registration.namespace("odyssey")``. Returns the Gymnasium ids.
    """
    ids = []
    for name in ENVIRONMENTS.names():
        gym_id = f"{GYM_NAMESPACE}/{name}"
        if gym_id not in gymnasium.registry:
            _gym_register(ENVIRONMENTS.get(name))
        ids.append(gym_id)
    return ids


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

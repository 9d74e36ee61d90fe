"""ALFWorld households on alfworld's TextWorld engine, with games Odyssey generates itself.

``register_alfworld_envs()`` adds ``alfworld`` (all six task types) and one env per task type,
``alfworld-pick``, ``-look``, ``-clean``, ``-heat``, ``-cool`` and ``-pick2``, to the
environment registry and to Gymnasium (``odyssey/<name>``). Registering imports nothing from
alfworld; making an env needs the extra (``pip install 'odyssey-core[alfworld]'``) and says so
when it is missing. Pass ``data_path=`` to play the official ALFWorld games instead.
"""

from __future__ import annotations

from odyssey_core.envs.alfworld.engine import ALFWORLD_INSTALL_HINT, require_alfworld
from odyssey_core.envs.alfworld.generate import (
    TASK_SHORT_NAMES,
    TASK_TYPES,
    HouseholdGame,
    TaskSpec,
    generate_game,
    write_games,
)

__all__ = [
    "ALFWORLD_ENVS",
    "ALFWORLD_INSTALL_HINT",
    "TASK_SHORT_NAMES",
    "TASK_TYPES",
    "HouseholdGame",
    "TaskSpec",
    "generate_game",
    "register_alfworld_envs",
    "require_alfworld",
    "write_games",
]

ENTRY_POINT = "odyssey_core.envs.alfworld.env:AlfWorldEnv"

# registry name -> (task types, description)
ALFWORLD_ENVS: dict[str, tuple[tuple[str, ...], str]] = {
    "alfworld": (TASK_TYPES, "ALFWorld households, all six task types (generated games)"),
    **{
        f"alfworld-{short}": ((full,), f"ALFWorld {full} (generated games)")
        for full, short in TASK_SHORT_NAMES.items()
    },
}


def register_alfworld_envs() -> list[str]:
    """Register the ALFWorld envs that are not registered yet; returns the names it added."""
    from odyssey_core.envs.registry import ENVIRONMENTS, EnvSpec, register_env

    added = []
    for name, (task_types, description) in ALFWORLD_ENVS.items():
        if name in ENVIRONMENTS:
            continue
        register_env(
            EnvSpec(
                name=name,
                entry_point=ENTRY_POINT,
                kwargs={"task_types": list(task_types)},
                description=description,
            )
        )
        added.append(name)
    return added

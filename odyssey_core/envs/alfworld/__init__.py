"""ALFWorld households on alfworld's TextWorld engine, with games Odyssey generates itself.

``ALFWORLD_ENVS`` (in ``specs``) lists ``alfworld`` (all six task types) and one env per task
type, ``alfworld-pick``, ``-look``, ``-clean``, ``-heat``, ``-cool`` and ``-pick2``, as data;
``odyssey_core.envs.registry`` registers them (and with Gymnasium as ``odyssey/<name>``).
Registering imports nothing from alfworld; making an env needs the extra
(``pip install 'odyssey-core[alfworld]'``) and says so when it is missing. Pass
``data_path=`` to play the official ALFWorld games instead.
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
from odyssey_core.envs.alfworld.specs import ALFWORLD_ENVS

__all__ = [
    "ALFWORLD_ENVS",
    "ALFWORLD_INSTALL_HINT",
    "TASK_SHORT_NAMES",
    "TASK_TYPES",
    "HouseholdGame",
    "TaskSpec",
    "generate_game",
    "require_alfworld",
    "write_games",
]

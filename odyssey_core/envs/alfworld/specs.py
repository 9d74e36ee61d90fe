"""The ALFWorld environments as data: ``alfworld`` (all six task types) and one env per task
type (``alfworld-pick``, ``-look``, ``-clean``, ``-heat``, ``-cool``, ``-pick2``).

Nothing here imports alfworld; making an env needs the extra and says so when it is missing.
"""

from __future__ import annotations

from odyssey_core.envs.alfworld.generate import TASK_SHORT_NAMES, TASK_TYPES
from odyssey_core.envs.spec import EnvSpec

__all__ = ["ALFWORLD_ENVS"]

ENTRY_POINT = "odyssey_core.envs.alfworld.env:AlfWorldEnv"

ALFWORLD_ENVS: tuple[EnvSpec, ...] = (
    EnvSpec(
        name="alfworld",
        entry_point=ENTRY_POINT,
        kwargs={"task_types": list(TASK_TYPES)},
        description="ALFWorld households, all six task types (generated games)",
    ),
    *(
        EnvSpec(
            name=f"alfworld-{short}",
            entry_point=ENTRY_POINT,
            kwargs={"task_types": [full]},
            description=f"ALFWorld {full} (generated games)",
        )
        for full, short in TASK_SHORT_NAMES.items()
    ),
)

"""The Game Boy environments as data: one spec per level of odland and Super Mario Land.

Importing this module does not load the emulator; ``factory.make_gameboy_env`` does.
"""

from __future__ import annotations

from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS
from odyssey_core.envs.spec import EnvSpec

__all__ = ["PYBOY_ENVS"]

ENTRY_POINT = "odyssey_core.envs.pyboy.factory:make_gameboy_env"

PYBOY_ENVS: tuple[EnvSpec, ...] = tuple(
    EnvSpec(
        name=f"{game}-{level}",
        entry_point=ENTRY_POINT,
        kwargs={"game": game, "level": level},
        description=f"{what} level {level}",
    )
    for game, levels, what in (
        ("odland", ODLAND_LEVELS, "odland (open, packaged ROM)"),
        ("mario", MARIO_LEVELS, "Super Mario Land (your ROM via ODYSSEY_SML_ROM)"),
    )
    for level in levels
)

"""Super Mario Land through PyBoy's game wrapper. The ROM is the user's: never shipped, never needed
by tests; its path comes from the config or ``ODYSSEY_SML_ROM``."""

from __future__ import annotations

import os
from pathlib import Path

from pyboy import PyBoy

from odyssey_core.envs.pyboy.game import GameBoyGame, GameSnapshot
from odyssey_core.envs.pyboy.levels import MARIO_LEVELS
from odyssey_core.envs.pyboy.rom import RomError, validate_rom

ROM_ENV_VAR = "ODYSSEY_SML_ROM"
ROM_TITLE = "SUPER MARIOLAND"
LEVELS = MARIO_LEVELS

DEATH_ADDRESS = 0xFFA6  # above 0x80 while Mario's death sequence runs
DEATH_THRESHOLD = 0x80


def world_level(level: str) -> tuple[int, int]:
    world, stage = level.split("-")
    return int(world), int(stage)


def resolve_rom_path(rom_path: str | Path | None) -> Path:
    if rom_path is not None:
        return Path(rom_path)
    from_env = os.environ.get(ROM_ENV_VAR)
    if not from_env:
        raise RomError(
            "Super Mario Land needs your own ROM: set env.rom_path in the config or the "
            f"{ROM_ENV_VAR} environment variable to the .gb file. Odyssey never ships it; "
            "the open odland game (odland-1-1 ...) needs no ROM from you."
        )
    return Path(from_env)


class SuperMarioLand(GameBoyGame):
    name = "mario"
    levels = LEVELS

    def __init__(self, rom_path: str | Path | None = None, timer_div: int = 0) -> None:
        self._rom_path = resolve_rom_path(rom_path)
        # A fixed DIV keeps the game's randomness, and so every rollout, reproducible.
        self.timer_div = timer_div

    def rom_path(self) -> Path:
        return validate_rom(self._rom_path, expected_title=ROM_TITLE, what="Super Mario Land").path

    def start_level(self, pyboy: PyBoy, level: str) -> None:
        wrapper = pyboy.game_wrapper
        wrapper.start_game(
            timer_div=self.timer_div, world_level=world_level(self.check_level(level))
        )

    def set_lives(self, pyboy: PyBoy, lives: int) -> None:
        pyboy.game_wrapper.set_lives_left(lives)

    def read(self, pyboy: PyBoy, level: str) -> GameSnapshot:
        wrapper = pyboy.game_wrapper
        game_over = bool(wrapper.game_over())
        return GameSnapshot(
            progress=int(wrapper.level_progress),
            lives=int(wrapper.lives_left),
            dead=pyboy.memory[DEATH_ADDRESS] > DEATH_THRESHOLD or game_over,
            # The wrapper's world moves on once the level's goal is passed.
            goal_reached=not game_over and tuple(wrapper.world) != world_level(level),
            game_over=game_over,
            extras={"world": tuple(wrapper.world), "time_left": int(wrapper.time_left)},
        )

"""Super Mario Land. The ROM is the user's: never shipped, never needed by tests; its path comes
from the config or ``ODYSSEY_SML_ROM``.

PyBoy's game wrapper still drives the title menu to a level's first frame (``start_game``), but
the game state is decoded here, on every read, from what the emulator's save state holds: RAM,
and the scroll register the LCD latched for the first line below the HUD. The wrapper's own
fields (``level_progress``, ``lives_left``, ``world``, ``time_left``) are refreshed only in its
``post_tick``, which ``PyBoy.load_state`` does not run: read right after a load they describe
the state before it, and the first reward of a reused env came out as 10 x (level start - the
previous episode's final progress).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pyboy import PyBoy

from odyssey_core.envs.pyboy.game import GameBoyGame, GameSnapshot
from odyssey_core.envs.pyboy.levels import MARIO_LEVELS
from odyssey_core.envs.pyboy.rom import RomError, validate_rom

ROM_ENV_VAR = "ODYSSEY_SML_ROM"
ROM_TITLE = "SUPER MARIOLAND"
LEVELS = MARIO_LEVELS

# RAM map (facts about the game; see the Data Crystal RAM map and the SML disassembly)
TIME_LEFT = 0xDA01  # 2 bytes BCD: ones and tens, then hundreds
LIVES = 0xDA15  # BCD
LIVES_DISPLAY = 0x9806  # 2 tiles in the HUD: tens digit, ones digit
GAME_OVER_ADDRESS = 0xC0A4
GAME_OVER_VALUE = 0x39
LEVEL_BLOCK = 0xC0AB  # level columns loaded, counted in blocks of 16 pixels
MARIO_X = 0xC202  # Mario's x on screen
WORLD_LEVEL = 0xFFB4  # world in the high nibble, level in the low one
DEATH_ADDRESS = 0xFFA6  # above 0x80 while Mario's death sequence runs
DEATH_THRESHOLD = 0x80
# The HUD is the top 16 lines; the game's interrupt then sets SCX to its scroll (kept in HRAM at
# 0xFFA4) for the playfield. The LCD records SCX per line and save states carry that record.
PLAYFIELD_FIRST_LINE = 16

# The paper's maximum level progress (Odysseus, Table 2), for the training levels. Progress is
# the same quantity as PyBoy's wrapper ``level_progress``, so these are directly comparable.
PAPER_MAX_PROGRESS: dict[str, int] = {
    "1-1": 2351,
    "1-2": 2190,
    "1-3": 2336,
    "2-1": 2510,
    "2-2": 2191,
}


class Memory(Protocol):
    def __getitem__(self, address: int) -> int: ...


def bcd(byte: int) -> int:
    """A binary-coded-decimal byte as a number: 0x12 -> 12."""
    return (byte >> 4) * 10 + (byte & 0x0F)


def to_bcd(value: int) -> int:
    if not 0 <= value <= 99:
        raise ValueError(f"a BCD byte holds 0..99, got {value}")
    return ((value // 10) << 4) | (value % 10)


def world_level(level: str) -> tuple[int, int]:
    world, stage = level.split("-")
    return int(world), int(stage)


def decode_world(memory: Memory) -> tuple[int, int]:
    byte = memory[WORLD_LEVEL]
    return byte >> 4, byte & 0x0F


def level_progress(block: int, scroll_x: int, mario_x: int) -> int:
    """Mario's x distance from the level's start, in pixels: ``16 * block + (scroll_x - 7) mod 16
    + mario_x`` -- the 16-pixel blocks of the level the game has loaded, the scroll within the
    current block and Mario's x on screen. This is PyBoy's ``level_progress`` formula, so the
    paper's numbers (measured with it) stay comparable."""
    return 16 * block + (scroll_x - 7) % 16 + mario_x


def decode_progress(memory: Memory, scroll_x: int) -> int:
    """Progress from RAM and ``scroll_x``, the SCX of the first playfield line."""
    return level_progress(memory[LEVEL_BLOCK], scroll_x, memory[MARIO_X])


def playfield_scroll_x(pyboy: PyBoy) -> int:
    """The SCX the LCD latched for the first line below the HUD in the last frame."""
    return int(pyboy.screen.tilemap_position_list[PLAYFIELD_FIRST_LINE][0])


def decode_time_left(memory: Memory) -> int:
    return bcd(memory[TIME_LEFT]) + 100 * bcd(memory[TIME_LEFT + 1])


def decode(memory: Memory, level: str, *, scroll_x: int) -> GameSnapshot:
    """The game state in ``memory`` (anything indexable by address) for an episode on ``level``;
    ``scroll_x`` is the playfield's SCX (:func:`playfield_scroll_x`)."""
    game_over = memory[GAME_OVER_ADDRESS] == GAME_OVER_VALUE
    world = decode_world(memory)
    return GameSnapshot(
        progress=decode_progress(memory, scroll_x),
        lives=bcd(memory[LIVES]),
        dead=memory[DEATH_ADDRESS] > DEATH_THRESHOLD or game_over,
        # The world byte moves on once the level's goal is passed.
        goal_reached=not game_over and world != world_level(level),
        game_over=game_over,
        extras={"world": world, "time_left": decode_time_left(memory)},
    )


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

    def __init__(
        self,
        rom_path: str | Path | None = None,
        max_progress: Mapping[str, int] | None = None,
    ) -> None:
        self._rom_path = resolve_rom_path(rom_path)
        self._max_progress = dict(PAPER_MAX_PROGRESS if max_progress is None else max_progress)

    def rom_path(self) -> Path:
        return validate_rom(self._rom_path, expected_title=ROM_TITLE, what="Super Mario Land").path

    def start_level(self, pyboy: PyBoy, level: str) -> None:
        # The menus are driven with DIV 0, so the cached level start is one fixed state; the
        # env sets each episode's DIV on it (``GameBoyEnvConfig.timer_div``).
        pyboy.game_wrapper.start_game(timer_div=0, world_level=world_level(self.check_level(level)))

    def set_lives(self, pyboy: PyBoy, lives: int) -> None:
        value = to_bcd(lives)
        memory: Any = pyboy.memory
        memory[LIVES] = value
        memory[LIVES_DISPLAY] = value >> 4
        memory[LIVES_DISPLAY + 1] = value & 0x0F

    def read(self, pyboy: PyBoy, level: str) -> GameSnapshot:
        return decode(pyboy.memory, level, scroll_x=playfield_scroll_x(pyboy))

    def max_progress(self, level: str) -> int | None:
        """The paper's maximum progress (Table 2) for the training levels; unknown elsewhere."""
        return self._max_progress.get(level)

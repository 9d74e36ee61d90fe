"""odland: Odyssey's own open Game Boy platformer (C source in ``roms/odland/``).

The RAM map below is the game's contract with this module; ``roms/odland/README.md``
documents it in full.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pyboy import PyBoy

from odyssey_core.envs.pyboy.game import GameBoyGame, GameSnapshot
from odyssey_core.envs.pyboy.levels import ODLAND_LEVELS
from odyssey_core.envs.pyboy.rom import validate_rom

ROM_TITLE = "ODLAND"
LEVELS = ODLAND_LEVELS

# RAM map (WRAM, fixed addresses)
MAGIC = 0xC000  # 'O', 'D'
STATE = 0xC002
LEVEL_ID = 0xC003
LIVES = 0xC004
PLAYER_X = 0xC005  # u16 LE, pixels from the level's left edge: the progress
PLAYER_Y = 0xC007
DEATH_FLAG = 0xC008
GOAL_FLAG = 0xC009
CAMERA_X = 0xC00A  # u16 LE
LEVEL_SELECT = 0xC00C
LEVEL_COUNT = 0xC00D
GOAL_X = 0xC00E  # u16 LE
ON_GROUND = 0xC010
VELOCITY_Y = 0xC012  # signed, 1/16 px per frame, negative = up
OBJECTS = 0xC020  # 8 entries x (kind, x_lo, x_hi, y)
OBJECT_SLOTS = 8

STATE_TITLE, STATE_PLAYING, STATE_DYING, STATE_CLEARED, STATE_GAME_OVER = range(5)
STATE_NAMES = {
    STATE_TITLE: "title",
    STATE_PLAYING: "playing",
    STATE_DYING: "dying",
    STATE_CLEARED: "cleared",
    STATE_GAME_OVER: "game_over",
}
OBJECT_KINDS = {1: "walker", 2: "block", 3: "gap", 4: "goal"}

# Frames allowed for booting to the title and for a level to start; far above what the game needs.
BOOT_FRAME_LIMIT = 600
START_FRAME_LIMIT = 300


def packaged_rom() -> Path:
    return Path(str(resources.files("odyssey_core.envs.pyboy") / "roms" / "odland.gb"))


def _u16(pyboy: PyBoy, address: int) -> int:
    memory = pyboy.memory
    return memory[address] | (memory[address + 1] << 8)


def read_objects(pyboy: PyBoy) -> list[dict[str, int | str]]:
    """The game's table of nearby objects, empty slots left out."""
    objects = []
    memory = pyboy.memory
    for slot in range(OBJECT_SLOTS):
        base = OBJECTS + 4 * slot
        kind = memory[base]
        if kind == 0:
            continue
        objects.append(
            {
                "kind": OBJECT_KINDS.get(kind, f"unknown-{kind}"),
                "x": memory[base + 1] | (memory[base + 2] << 8),
                "y": memory[base + 3],
            }
        )
    return objects


class Odland(GameBoyGame):
    name = "odland"
    levels = LEVELS

    def __init__(self, rom_path: str | Path | None = None) -> None:
        self._rom_path = Path(rom_path) if rom_path is not None else packaged_rom()
        self._goal_x: dict[str, int] = {}

    def rom_path(self) -> Path:
        return validate_rom(self._rom_path, expected_title=ROM_TITLE, what="odland").path

    def start_level(self, pyboy: PyBoy, level: str) -> None:
        """Boot to the title, write the level id into the select byte, press START."""
        level_id = LEVELS.index(self.check_level(level))
        memory = pyboy.memory
        for _ in range(BOOT_FRAME_LIMIT):
            if memory[MAGIC] == ord("O") and memory[MAGIC + 1] == ord("D") and memory[STATE] == 0:
                break
            pyboy.tick(1, False)
        else:
            raise RuntimeError(
                f"odland did not reach its title screen in {BOOT_FRAME_LIMIT} frames; "
                "is the ROM intact? (`make rom-check` rebuilds and compares it)"
            )
        memory[LEVEL_SELECT] = level_id
        pyboy.button_press("start")
        pyboy.tick(2, False)
        pyboy.button_release("start")
        for _ in range(START_FRAME_LIMIT):
            if memory[STATE] == STATE_PLAYING and memory[LEVEL_ID] == level_id:
                break
            pyboy.tick(1, False)
        else:
            raise RuntimeError(f"odland did not start level {level} in {START_FRAME_LIMIT} frames")
        # The game switches the LCD off to load a level; the first frame after it is back on
        # is blank on the hardware, so let it pass before anyone looks.
        pyboy.tick(1, False)
        self._goal_x[level] = _u16(pyboy, GOAL_X)

    def set_lives(self, pyboy: PyBoy, lives: int) -> None:
        pyboy.memory[LIVES] = lives

    def read(self, pyboy: PyBoy, level: str) -> GameSnapshot:
        memory = pyboy.memory
        state = memory[STATE]
        if level in LEVELS and memory[LEVEL_ID] == LEVELS.index(level):
            # the level's goal is in RAM whenever it is loaded, also from a save state
            self._goal_x[level] = _u16(pyboy, GOAL_X)
        return GameSnapshot(
            progress=_u16(pyboy, PLAYER_X),
            lives=memory[LIVES],
            dead=bool(memory[DEATH_FLAG]) or state == STATE_DYING,
            goal_reached=bool(memory[GOAL_FLAG]) or state == STATE_CLEARED,
            game_over=state == STATE_GAME_OVER,
            extras={
                "player_y": memory[PLAYER_Y],
                "camera_x": _u16(pyboy, CAMERA_X),
                "on_ground": bool(memory[ON_GROUND]),
                "velocity_y": memory[VELOCITY_Y] - 256 * (memory[VELOCITY_Y] >= 128),
                "game_state": STATE_NAMES.get(state, f"unknown-{state}"),
                "objects": read_objects(pyboy),
            },
        )

    def max_progress(self, level: str) -> int | None:
        return self._goal_x.get(level)

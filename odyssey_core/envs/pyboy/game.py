"""What a Game Boy platformer must tell the environment: how to start a level and what RAM says."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyboy import PyBoy


@dataclass(frozen=True)
class GameSnapshot:
    """The privileged game state read from RAM after a turn."""

    progress: int  # x distance from the level's start, in pixels
    lives: int
    dead: bool  # a death is under way or has just happened
    goal_reached: bool
    game_over: bool
    extras: dict[str, Any] = field(default_factory=dict)


class GameBoyGame(ABC):
    """One game: its ROM, its levels, how to reach a level's start, and its RAM map."""

    name: str
    levels: tuple[str, ...]

    @abstractmethod
    def rom_path(self) -> Path:
        """The checked ROM path; raises ``RomError`` with a clear message when it is wrong."""

    @abstractmethod
    def start_level(self, pyboy: PyBoy, level: str) -> None:
        """Drive a freshly booted emulator to the first controllable frame of ``level``."""

    @abstractmethod
    def read(self, pyboy: PyBoy, level: str) -> GameSnapshot:
        """Read the game state from RAM; ``level`` is the level the episode is playing."""

    def max_progress(self, level: str) -> int | None:
        """The progress at the level's goal, when the game knows it."""
        return None

    def check_level(self, level: str) -> str:
        if level not in self.levels:
            raise ValueError(
                f"{self.name} has no level {level!r}; choose one of: {', '.join(self.levels)}"
            )
        return level

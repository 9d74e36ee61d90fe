"""Building Game Boy environments by game and level name."""

from __future__ import annotations

from typing import Any

from odyssey_core.config import GameBoyEnvConfig
from odyssey_core.envs.pyboy.env import GameBoyEnv
from odyssey_core.envs.pyboy.game import GameBoyGame


def make_game(name: str, rom_path: Any = None) -> GameBoyGame:
    if name == "odland":
        from odyssey_core.envs.pyboy.odland import Odland

        return Odland(rom_path)
    if name == "mario":
        from odyssey_core.envs.pyboy.mario import SuperMarioLand

        return SuperMarioLand(rom_path)
    raise ValueError(f"unknown Game Boy game {name!r}; known: odland, mario")


def make_gameboy_env(
    game: str, level: str, config: GameBoyEnvConfig | None = None, **overrides: Any
) -> GameBoyEnv:
    """Build one level; ``config`` supplies the turn settings, ``overrides`` replace its fields."""
    base = (config or GameBoyEnvConfig()).model_dump()
    base.update(game=game, level=level, **overrides)
    env_config = GameBoyEnvConfig.model_validate(base)
    return GameBoyEnv(make_game(env_config.game, env_config.rom_path), env_config)

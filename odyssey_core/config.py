"""Configuration as pydantic models, loaded from the YAML presets under ``configs/``.

A preset is a YAML file whose top-level keys are sections (``env``, ...). Later stages add
their own sections; unknown keys are rejected so a typo never passes silently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

GameName = Literal["odland", "mario"]
FallbackName = Literal["noop", "random"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GameBoyEnvConfig(StrictModel):
    """One Game Boy platformer level with the Odysseus turn semantics."""

    game: GameName = "odland"
    level: str = "1-1"
    rom_path: Path | None = Field(
        default=None,
        description="odland: the packaged ROM when unset; mario: here or in ODYSSEY_SML_ROM",
    )
    max_turns: int = Field(
        default=400, ge=1, description="400 in the paper's main runs, 80 in ablations"
    )
    hold_frames: int = Field(default=5, ge=1, description="frames the buttons are held without 'a'")
    jump_hold_frames: int = Field(
        default=15, ge=1, description="frames the buttons are held with 'a'"
    )
    settle_frames: int = Field(
        default=1, ge=1, description="frames run after release; the last is rendered"
    )
    reward_scale: float = Field(
        default=10.0, description="reward = scale x progress gained on the turn"
    )
    invalid_action: FallbackName = Field(
        default="noop",
        description="what an unparsable answer does: press nothing or a random legal action",
    )
    max_code_buttons: int = Field(
        default=2,
        ge=1,
        le=6,
        description="buttons a tuple action from code may press at once; model answers stay at "
        "two (the classical baseline's engineered actions need three)",
    )
    start_lives: int | None = Field(
        default=None,
        ge=1,
        le=99,
        description="odland only: lives at the level start (None: the game's 3)",
    )


class OdysseyConfig(StrictModel):
    """The whole configuration of a run; each stage reads its own section."""

    seed: int = 0
    env: GameBoyEnvConfig = GameBoyEnvConfig()


def config_dir() -> Path:
    """Where presets live: ``ODYSSEY_CONFIG_DIR`` or the repository's ``configs/``."""
    override = os.environ.get("ODYSSEY_CONFIG_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "configs"


def available_presets() -> list[str]:
    directory = config_dir()
    return sorted(p.stem for p in directory.glob("*.yaml")) if directory.is_dir() else []


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` laid over ``base``, section by section (nested dicts merge, the rest
    replaces)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(
    preset: str | Path = "tiny", overrides: dict[str, Any] | None = None
) -> OdysseyConfig:
    """Load a preset by name (``tiny``, ``paper``) or by path, then apply nested overrides."""
    path = Path(preset)
    if path.suffix not in {".yaml", ".yml"}:
        path = config_dir() / f"{preset}.yaml"
    if not path.is_file():
        known = ", ".join(available_presets()) or "(none found)"
        raise FileNotFoundError(
            f"config preset {str(preset)!r} not found at {path}; known presets: {known}"
        )
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: a preset must be a mapping of sections, got {type(data).__name__}"
        )
    data = deep_merge(data, overrides or {})
    try:
        return OdysseyConfig.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"invalid configuration in {path}:\n{err}") from None

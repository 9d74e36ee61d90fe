"""Configuration as pydantic models, loaded from the YAML presets under ``configs/``.

A preset is a YAML file whose top-level keys are sections (``env``, ...). Later stages add
their own sections; unknown keys are rejected so a typo never passes silently, and a key a
model renamed fails with the name that replaced it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo

GameName = Literal["odland", "mario"]
FallbackName = Literal["noop", "random"]


def renamed_keys_used(data: Any, renamed: Mapping[str, str]) -> list[str]:
    """One message per key of ``renamed`` (a dotted path: ``ppo.eps_low``) that the nested
    mapping ``data`` sets, naming what replaces it."""
    used = []
    for old, new in renamed.items():
        node = data
        for part in old.split("."):
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
        else:
            used.append(f"{old} was renamed: use {new}")
    return used


def reject_renamed_keys(data: Any, renamed: Mapping[str, str]) -> None:
    """Raise ``ValueError`` naming the replacement of every renamed key ``data`` still sets."""
    used = renamed_keys_used(data, renamed)
    if used:
        raise ValueError("; ".join(used))


class RenamedKeysModel(BaseModel):
    """A model whose ``renamed_keys`` maps the dotted path of a key it no longer has to what
    replaces it, so an old preset fails with the new name instead of a bare "extra inputs are
    not permitted"."""

    renamed_keys: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _no_renamed_keys(cls, data: Any) -> Any:
        reject_renamed_keys(data, cls.renamed_keys)
        return data


class StrictModel(RenamedKeysModel):
    """A settings model: unknown keys are errors (a renamed one names its replacement, see
    :class:`RenamedKeysModel`), instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def redefault(base: type[BaseModel], name: str, default: Any, description: str) -> Any:
    """Field ``name`` of ``base`` with its bounds kept and its own ``default`` and
    ``description``: how a recipe's section gives a shared knob the recipe's value
    (``clip_low: float = redefault(PPOSettings, "clip_low", 0.1, "Table 2")``)."""
    return FieldInfo.merge_field_infos(
        base.model_fields[name], default=default, description=description
    )


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
    malformed_penalty: float | None = Field(
        default=None,
        description="None: a malformed model answer plays invalid_action with the normal "
        "reward; a number (the public release: -100): the emulator is not stepped, the turn's "
        "reward is this number and the next observation's text says the answer was malformed",
    )
    timer_div: int | Literal["seed"] = Field(
        default="seed",
        description="the DIV timer register at each level start, which games read as their "
        "randomness: 'seed' draws it from the episode seed (the release draws it at every "
        "reset), or a fixed 0..255 for byte-identical starts",
    )

    @model_validator(mode="after")
    def _timer_div_is_a_byte(self) -> GameBoyEnvConfig:
        if self.timer_div != "seed" and not 0 <= self.timer_div <= 255:
            raise ValueError(
                f"env.timer_div is a byte (0..255) or 'seed', got {self.timer_div}; "
                "use 'seed' to draw it from the episode seed"
            )
        return self


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


def resolve_data_path(path: str | Path) -> Path:
    """A file a preset names: absolute, or relative to the working directory, or else to the
    folder that holds ``configs/`` (so presets can name files shipped in the repository or the
    package whichever directory a run starts in)."""
    path = Path(path).expanduser()
    if path.is_absolute() or path.exists():
        return path
    shipped = config_dir().parent / path
    return shipped if shipped.exists() else path


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


INHERIT_KEY = "inherit"
M = TypeVar("M", bound=BaseModel)


def preset_path(preset: str | Path, kind: str = "") -> Path:
    """A YAML path as given, or a preset name resolved to ``configs/<kind>/<name>.yaml``."""
    path = Path(preset)
    if path.suffix in {".yaml", ".yml"}:
        return path
    return config_dir() / kind / f"{preset}.yaml"


def read_preset(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A preset's mapping; ``inherit: other.yaml`` (relative to the file) is read first and
    this file's keys are laid over it."""
    path = path.resolve()
    if path in seen:
        raise ValueError(f"inherit cycle: {' -> '.join(map(str, (*seen, path)))}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: a preset must be a mapping of sections, got {type(data).__name__}"
        )
    parent = data.pop(INHERIT_KEY, None)
    if parent is None:
        return data
    return deep_merge(read_preset(path.parent / parent, (*seen, path)), data)


def load_preset(
    model: type[M],
    preset: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    kind: str = "",
    what: str = "config",
    moved_from: str | None = None,
) -> M:
    """Every preset loader in one: find the file (a name under ``configs/<kind>/`` or a path),
    follow ``inherit:``, lay nested ``overrides`` over it, and validate into ``model``; errors
    name the file and list the presets there are. ``moved_from``: the folder under
    ``configs/`` these presets lived in before; a path into it is told where they are now."""
    path = preset_path(preset, kind)
    if not path.is_file():
        folder = config_dir() / kind
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) or "(none found)"
        moved = ""
        if moved_from is not None and path.parent.as_posix().endswith(f"configs/{moved_from}"):
            moved = f" (configs/{moved_from}/ moved to configs/{kind}/: use {folder / path.name})"
        raise FileNotFoundError(
            f"{what} preset {str(preset)!r} not found at {path}{moved}; known presets: {known}"
        )
    data = deep_merge(read_preset(path), dict(overrides or {}))
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"invalid {what} in {path}:\n{err}") from None


def load_config(
    preset: str | Path = "tiny", overrides: dict[str, Any] | None = None
) -> OdysseyConfig:
    """Load a preset by name (``tiny``, ``paper``) or by path, then apply nested overrides."""
    return load_preset(OdysseyConfig, preset, overrides, what="configuration")

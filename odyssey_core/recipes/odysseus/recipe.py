"""The Odysseus recipe as one object: :data:`RECIPE`, in :data:`odyssey_core.recipe.RECIPES`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from odyssey_core.config import GameName
from odyssey_core.protocol.prompts import build_turn_text, get_system_prompt
from odyssey_core.recipe import Capabilities, ExampleInput, Recipe
from odyssey_core.recipes.odysseus.pipeline import load_pipeline_config
from odyssey_core.recipes.odysseus.settings import RLTrainSettings, load_train_settings

__all__ = ["RECIPE"]

#: the Game Boy games an Odysseus model plays (a registered ``odysseus-<game>``)
GAMES: tuple[str, ...] = get_args(GameName)


def odysseus_system_prompt(env: str, env_kwargs: Mapping[str, Any] | None = None) -> str:
    """The game's prompt; a level name (``odland-1-1``) or an unknown env gets odland's."""
    return get_system_prompt(env if env in GAMES else "odland")


def owns_model(game: str, model_dir: Path | None) -> bool:
    return game in GAMES


def serving_env(game: str, model_dir: Path | None) -> str:
    return game


RECIPE = Recipe(
    name="odysseus",
    summary="PPO with a turn-level CNN critic and an auto-curriculum on Game Boy levels",
    settings_type=RLTrainSettings,
    load_settings=load_train_settings,
    system_prompt=odysseus_system_prompt,
    owns_model=owns_model,
    serving_env=serving_env,
    example_input=ExampleInput(text=build_turn_text("1-1"), frame_shape=(144, 160, 3)),
    load_pipeline=load_pipeline_config,
    capabilities=Capabilities(distributed=True, rollout_backends=("hf", "vllm", "openai")),
)

"""The ESPO recipe as one object: :data:`RECIPE`, found in :data:`odyssey_core.recipe.RECIPES`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from odyssey_core.recipe import Capabilities, ExampleInput, Recipe
from odyssey_core.recipes.espo.data import resolve_dataset
from odyssey_core.recipes.espo.pipeline import load_espo_pipeline_config
from odyssey_core.recipes.espo.prompts import ESPO_SYSTEM_PROMPT
from odyssey_core.recipes.espo.settings import EspoSettings, load_espo_settings

__all__ = ["RECIPE"]

GAME_PREFIX = "espo-"  # a registered ESPO model is odysseus-espo-<data>
SERVING_ENV = "persona"


def espo_system_prompt(env: str, env_kwargs: Mapping[str, Any] | None = None) -> str:
    """One prompt for every persona app."""
    return ESPO_SYSTEM_PROMPT


def owns_model(game: str, model_dir: Path | None) -> bool:
    return game.startswith(GAME_PREFIX)


def serving_env(game: str, model_dir: Path | None) -> str:
    return SERVING_ENV


def prepare(settings: EspoSettings, out_dir: Path) -> None:
    """Generate the preset's demonstrations into the run once (``data.dataset: null``), so
    that the ranks of a launched run all read one finished dataset folder."""
    resolve_dataset(settings.data, out_dir)


RECIPE = Recipe(
    name="espo",
    summary="episode-wise GRPO over teacher-forced GUI demonstrations (personalized agents)",
    settings_type=EspoSettings,
    load_settings=load_espo_settings,
    system_prompt=espo_system_prompt,
    owns_model=owns_model,
    serving_env=serving_env,
    example_input=ExampleInput(
        text="The user asked: a quiet hotel in Paris. No actions yet.", frame_shape=(448, 224, 3)
    ),
    load_pipeline=load_espo_pipeline_config,
    capabilities=Capabilities(distributed=True, rollout_backends=("hf", "vllm", "openai")),
    prepare=prepare,
)

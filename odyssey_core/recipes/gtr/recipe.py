"""The GTR recipe as one object: :data:`RECIPE`, found in :data:`odyssey_core.recipe.RECIPES`."""

from __future__ import annotations

from pathlib import Path

from odyssey_core.recipe import Capabilities, ExampleInput, Recipe
from odyssey_core.recipes.gtr.pipeline import load_gtr_pipeline_config, read_provenance
from odyssey_core.recipes.gtr.prompts import gtr_system_prompt
from odyssey_core.recipes.gtr.settings import GTRSettings, load_gtr_settings

__all__ = ["RECIPE"]

GAME_PREFIX = "gtr-"  # a registered GTR model is odysseus-gtr-<env>


def owns_model(game: str, model_dir: Path | None) -> bool:
    """A ``gtr-<env>`` game, or a model folder GTR wrote its provenance into."""
    provenance = read_provenance(model_dir) if model_dir is not None else None
    return game.startswith(GAME_PREFIX) or (provenance or {}).get("recipe") == "gtr"


def serving_env(game: str, model_dir: Path | None) -> str:
    """The env the provenance names, else the game's name without its prefix."""
    provenance = read_provenance(model_dir) if model_dir is not None else None
    return (provenance or {}).get("env") or game.removeprefix(GAME_PREFIX)


RECIPE = Recipe(
    name="gtr",
    summary="PPO with a corrector's thought cloning (DAgger) on card games and ALFWorld",
    settings_type=GTRSettings,
    load_settings=load_gtr_settings,
    system_prompt=gtr_system_prompt,
    owns_model=owns_model,
    serving_env=serving_env,
    example_input=ExampleInput(
        text="Reach the target number. Legal actions: 1, 2.",
        frame_shape=(96, 128, 3),
        legal_actions=("1", "2"),
    ),
    load_pipeline=load_gtr_pipeline_config,
    capabilities=Capabilities(distributed=True, rollout_backends=("hf", "vllm", "openai")),
)

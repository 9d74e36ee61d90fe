"""The recipe registry: every recipe package is found without importing one, each declares
what the layers below it used to guess (and it holds: its presets load, its format is a
registered one, it serves a model of its own games), settings it cannot run are refused at the
door naming the key, and a recipe from another distribution joins through the
``odyssey.recipes`` entry points, reaching ``odyssey train --recipe`` with no edit here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from odyssey_core.launch import LaunchSettings
from odyssey_core.policy.weight_sync import RolloutBackendSettings
from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.recipe import (
    CONVENTIONAL_PATHS,
    RECIPES,
    Capabilities,
    Recipe,
    RecipeError,
    RecipeRegistry,
    recipe_for_model,
)
from odyssey_core.recipes.espo import pipeline as espo_pipeline
from odyssey_core.recipes.espo import train as espo_train

ROOT = Path(__file__).resolve().parent.parent
IN_TREE = sorted(p.parent.name for p in (ROOT / "odyssey_core" / "recipes").glob("*/recipe.py"))


def test_every_recipe_package_is_registered_and_naming_one_imports_none() -> None:
    assert IN_TREE == ["espo", "gtr", "odysseus"]
    code = (
        "import json, sys; from odyssey_core.recipe import RECIPES; "
        "print(json.dumps([RECIPES.names(), "
        "sorted(m for m in sys.modules if m.startswith('odyssey_core.recipes'))]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    names, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert names == IN_TREE and imported == []


@pytest.mark.parametrize("name", IN_TREE)
def test_each_recipe_declares_what_the_layers_below_it_read(name: str) -> None:
    recipe = RECIPES.get(name)
    assert recipe.name == name and recipe.summary
    settings = recipe.load_settings(recipe.default_preset, None)
    assert isinstance(settings, recipe.settings_type)
    recipe.check(settings)  # the default preset runs
    assert recipe.response_format in RESPONSE_FORMATS
    pipeline = recipe.load_pipeline("tiny", None)
    assert recipe_for_model(pipeline.game).name == name  # its registered model is its own
    assert recipe.system_prompt(recipe.serving_env(pipeline.game, None), None).strip()
    height, width, channels = recipe.example_input.frame_shape
    assert height > 0 and width > 0 and channels == 3
    for capability in recipe.capabilities.rollout_backends:
        assert capability in ("hf", "vllm", "openai")


def test_what_a_recipe_leaves_out_is_found_in_its_package_by_convention() -> None:
    espo = RECIPES.get("espo")
    assert (espo.package, espo.response_format) == ("odyssey_core.recipes.espo", "espo")
    assert espo.build_trainer is espo_train.build_trainer
    assert espo.evaluate_model is espo_pipeline.evaluate_model
    assert espo.nightly_evaluate is espo_pipeline.nightly_evaluate
    conventional = {*CONVENTIONAL_PATHS, "package", "response_format"}
    declared = {k: v for k, v in espo.__dict__.items() if k not in conventional}
    with pytest.raises(
        RecipeError,
        match=r"recipe 'toy' declares no build_trainer and odyssey_core\.recipes\.toy\.train:"
        r"build_trainer cannot be imported .*pass build_trainer= to its Recipe",
    ):
        Recipe(**{**declared, "name": "toy"})
    elsewhere = Recipe(**{**declared, "name": "toy", "package": "odyssey_core.recipes.gtr"})
    assert elsewhere.response_format == "toy"
    assert elsewhere.build_trainer is RECIPES.get("gtr").build_trainer


def test_models_are_claimed_by_their_recipe(tmp_path: Path) -> None:
    assert recipe_for_model("odland").name == "odysseus"
    assert recipe_for_model("mario").name == "odysseus"
    assert recipe_for_model("gtr-points24").name == "gtr"
    assert recipe_for_model("espo-all").name == "espo"
    trained = tmp_path / "model"  # GTR's provenance in a model folder names it whatever the game
    trained.mkdir()
    (trained / "gtr_training.json").write_text(json.dumps({"recipe": "gtr", "env": "x"}))
    assert recipe_for_model("cards", trained).name == "gtr"
    assert RECIPES.get("gtr").serving_env("cards", trained) == "x"
    with pytest.raises(RecipeError, match=r"no recipe claims a model of game 'toy'.*espo, gtr"):
        recipe_for_model("toy")
    with pytest.raises(KeyError, match="unknown recipe 'nope'; known: espo, gtr, odysseus"):
        RECIPES.get("nope")


def test_settings_a_recipe_cannot_run_are_refused_naming_the_key() -> None:
    odysseus = RECIPES.get("odysseus")
    one_process = Recipe(
        **{**odysseus.__dict__, "capabilities": Capabilities(distributed=False)}  # hf only
    )
    settings = odysseus.load_settings("tiny", None)
    one_process.check(settings)
    launched = settings.model_copy(update={"launch": LaunchSettings(nproc_per_node=2)})
    with pytest.raises(
        RecipeError, match=r"trains in one process only; set launch\.nproc_per_node"
    ):
        one_process.check(launched)
    odysseus.check(launched)
    served = settings.model_copy(
        update={
            "rollout": settings.rollout.model_copy(
                update={"backend": RolloutBackendSettings(kind="openai", base_url="http://h/v1")}
            )
        }
    )
    with pytest.raises(RecipeError, match=r"rollout.backend 'openai'; it takes hf"):
        one_process.check(served)
    odysseus.check(served)


def test_a_registered_entry_that_is_not_its_recipe_is_an_error() -> None:
    recipes = RecipeRegistry("recipe")
    recipes.register("impostor", RECIPES.get("gtr"))
    recipes.register("prompt", "odyssey_core.recipes.espo.prompts:ESPO_SYSTEM_PROMPT")
    with pytest.raises(RecipeError, match="not a Recipe named so: 'gtr'"):
        recipes.get("impostor")
    with pytest.raises(RecipeError, match="the entry of recipe 'prompt' is not a Recipe"):
        recipes.get("prompt")


# -- a recipe from another distribution ---------------------------------------------------------

_PLUGIN = """
from odyssey_core.recipe import Capabilities, ExampleInput, Recipe
from odyssey_core.recipes.gtr.recipe import RECIPE as GTR

RECIPE = Recipe(
    **{
        **GTR.__dict__,
        "name": "toy",
        "summary": "GTR under another name, from another distribution",
        "owns_model": lambda game, model_dir: game.startswith("toy-"),
        "example_input": ExampleInput(text="toy", frame_shape=(8, 8, 3)),
        "capabilities": Capabilities(),
    }
)
"""


def test_a_recipe_from_an_entry_point_reaches_every_door(tmp_path: Path) -> None:
    (tmp_path / "toy_recipe.py").write_text(textwrap.dedent(_PLUGIN))
    dist = tmp_path / "toy_recipe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-recipe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[odyssey.recipes]\ntoy = toy_recipe:RECIPE\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = (
        "import json; from odyssey_core.recipe import RECIPES, recipe_for_model; "
        "from odyssey_core.registry.pyfunc import serving_spec; "
        "spec = serving_spec('toy-cards', env='cards-numberline'); "
        "print(json.dumps([RECIPES.names(), recipe_for_model('toy-x').name, spec['recipe'], "
        "spec['format']]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names, claimed, served, fmt = json.loads(done.stdout.strip().splitlines()[-1])
    assert names == ["espo", "gtr", "odysseus", "toy"]
    assert (claimed, served, fmt) == ("toy", "toy", "gtr")
    odyssey = Path(sys.executable).with_name("odyssey")
    helped = subprocess.run(
        [str(odyssey), "train", "--help"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert helped.returncode == 0 and "toy" in helped.stdout
    preset = tmp_path / "p.yaml"
    preset.write_text("launch: {nproc_per_node: 2}\n")  # the toy recipe trains in one process
    refused = subprocess.run(
        [str(odyssey), "train", "--recipe", "toy", "--preset", str(preset), "--out", "x"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert "recipe 'toy' trains in one process only" in refused.stderr

"""Every preset under ``configs/`` loads with its loader, the recipes name one knob the same way,
and a preset still written with a renamed key fails naming the new one. Config resolution
only: no model, no ROM, no GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from odyssey_core.baselines.sb3_ppo import load_sb3_ppo_settings
from odyssey_core.config import config_dir, load_config, read_preset
from odyssey_core.data.cli import load_curate_config
from odyssey_core.eval.suites import load_suite
from odyssey_core.recipe import RECIPES
from odyssey_core.recipes.espo.pipeline import (
    load_espo_pipeline_config,
    sweep_overlays,
    variant_overlay,
)
from odyssey_core.rl.train_settings import TrainSettings
from odyssey_core.sft.settings import load_sft_settings

CONFIGS = config_dir()
#: the one file a preset names that each user supplies (their Super Mario Land save state,
#: read by compare_mario.yaml and the baseline on its task), relative to the working directory
USER_STATE = Path("states/mario-1-1/tall-pipe-two-enemies.state")


def _recipe_presets(recipe: str) -> list[Path]:
    folder = CONFIGS / recipe
    return sorted(
        p for p in folder.rglob("*.yaml") if "pipeline" not in p.relative_to(folder).parts
    )


def test_every_preset_under_configs_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    USER_STATE.parent.mkdir(parents=True)
    USER_STATE.write_bytes(b"not read here")
    checked: set[Path] = set()
    for path in sorted(CONFIGS.glob("*.yaml")):
        load_config(path)
        checked.add(path)
    for kind, load in (
        ("baselines", load_sb3_ppo_settings),
        ("curate", load_curate_config),
        ("eval", load_suite),
        ("sft", load_sft_settings),
    ):
        for path in sorted((CONFIGS / kind).glob("*.yaml")):
            load(path)
            checked.add(path)
    for path in sorted((CONFIGS / "deepspeed").glob("*.json")):
        assert isinstance(json.loads(path.read_text()), dict)
        checked.add(path)
    for name in RECIPES.names():
        recipe = RECIPES.get(name)
        for path in _recipe_presets(name):
            settings = recipe.load_settings(path, None)
            assert isinstance(settings, TrainSettings), (path, type(settings))
            checked.add(path)
        for path in sorted((CONFIGS / name / "pipeline").glob("*.yaml")):
            cfg = recipe.load_pipeline(path, None)
            # the training preset the pipeline names, with its overrides, loads too
            recipe.load_settings(cfg.train.preset, cfg.train.overrides)
            checked.add(path)
    # ESPO's paper variants and sweep cells are overlays of a pipeline preset
    for path in sorted((CONFIGS / "espo" / "pipeline" / "variants").glob("*.yaml")):
        assert variant_overlay(path.stem) == read_preset(path)
        cfg = load_espo_pipeline_config("tiny", variant=path.stem)
        RECIPES.get("espo").load_settings(cfg.train.preset, cfg.train.overrides)
        checked.add(path)
    for path in sorted((CONFIGS / "espo" / "pipeline" / "sweeps").glob("*.yaml")):
        for overlay in sweep_overlays(path.stem).values():
            cfg = load_espo_pipeline_config("tiny", overlay)
            RECIPES.get("espo").load_settings(cfg.train.preset, cfg.train.overrides)
        checked.add(path)
    every = {p for p in CONFIGS.rglob("*") if p.is_file()}
    assert every - checked == set(), "presets no test loads"
    assert {"odysseus", "gtr", "espo"} <= set(RECIPES.names())


def test_the_pipeline_presets_have_one_shape() -> None:
    """configs/<recipe>/pipeline/*.yaml for every recipe, a ``train:`` stage, a
    ``promotion:`` gate with the same knobs."""
    old_folders = ("pipeline", "gtr_pipeline", "espo_pipeline")
    assert not any((CONFIGS / folder).exists() for folder in old_folders)
    for name in RECIPES.names():
        presets = sorted((CONFIGS / name / "pipeline").glob("*.yaml"))
        assert presets, f"recipe {name} has no pipeline preset"
        for path in presets:
            cfg = RECIPES.get(name).load_pipeline(path, None)
            assert {"preset", "overrides"} <= set(type(cfg.train).model_fields)
            assert {"margin", "alpha", "nightly_margin"} <= set(type(cfg.promotion).model_fields)


def test_the_shared_knobs_have_one_name_in_every_recipe() -> None:
    shared = {
        "advantage": {"estimator", "gamma", "gae_lambda", "normalize"},
        "ppo": {
            "clip_low",
            "clip_high",
            "epochs",
            "minibatch_size",
            "lr",
            "weight_decay",
            "grad_clip",
            "entropy_coef",
        },
        "rollout": {"generation", "score_micro_batch", "backend"},
    }
    for name in RECIPES.names():
        settings = RECIPES.get(name).load_settings("tiny", None)
        assert isinstance(settings, TrainSettings)
        for section, knobs in shared.items():
            assert knobs <= set(type(getattr(settings, section)).model_fields), (name, section)
        assert settings.launch.processes == 1 and settings.rollout.backend.kind == "hf"


# -- presets written with the old names --------------------------------------------------------

RENAMED = [
    ("odysseus", {"ppo": {"eps_low": 0.2}}, "ppo.eps_low was renamed: use ppo.clip_low"),
    ("odysseus", {"ppo": {"eps_high": 0.28}}, "ppo.eps_high was renamed: use ppo.clip_high"),
    ("odysseus", {"ppo": {"gamma": 0.95}}, "ppo.gamma was renamed: use advantage.gamma"),
    ("odysseus", {"estimator": "ppo_critic"}, "estimator was renamed: use advantage.estimator"),
    (
        "odysseus",
        {"actor_weight_decay": 0.0},
        "actor_weight_decay was renamed: use ppo.weight_decay",
    ),
    ("gtr", {"ppo": {"clip": 0.1}}, "ppo.clip was renamed: use ppo.clip_low and ppo.clip_high"),
    ("gtr", {"ppo": {"gamma": 0.9}}, "ppo.gamma was renamed: use advantage.gamma"),
    ("gtr", {"ppo": {"gae_lambda": 0.95}}, "ppo.gae_lambda was renamed: use advantage.gae_lambda"),
    (
        "gtr",
        {"ppo": {"normalize_advantages": True}},
        "ppo.normalize_advantages was renamed: use advantage.normalize",
    ),
    ("espo", {"grpo": {"lr": 1e-6}}, "grpo was renamed: use ppo"),
    ("espo", {"grpo": {"ppo_epochs": 1}}, "grpo.ppo_epochs was renamed: use ppo.epochs"),
]


@pytest.mark.parametrize(("recipe", "old", "message"), RENAMED)
def test_an_old_training_preset_fails_naming_the_new_key(
    tmp_path: Path, recipe: str, old: dict[str, Any], message: str
) -> None:
    preset = tmp_path / "old.yaml"
    preset.write_text(yaml.safe_dump({"inherit": str(CONFIGS / recipe / "tiny.yaml"), **old}))
    with pytest.raises(ValueError, match=message.replace(".", r"\.")) as raised:
        RECIPES.get(recipe).load_settings(preset, None)
    assert str(preset) in str(raised.value)  # and which file says it


def test_an_old_pipeline_preset_fails_naming_the_new_key_or_folder(tmp_path: Path) -> None:
    odysseus = RECIPES.get("odysseus")
    old = yaml.safe_load((CONFIGS / "odysseus" / "pipeline" / "tiny.yaml").read_text())
    old["rl"] = old.pop("train")
    preset = tmp_path / "old-pipeline.yaml"
    preset.write_text(yaml.safe_dump(old))
    with pytest.raises(ValueError, match="rl was renamed: use train"):
        odysseus.load_pipeline(preset, None)
    # an old key inside the training overrides is named by the training preset's loader
    cfg = odysseus.load_pipeline("tiny", {"train": {"overrides": {"ppo": {"eps_low": 0.1}}}})
    with pytest.raises(ValueError, match=r"ppo\.eps_low was renamed: use ppo\.clip_low"):
        odysseus.load_settings(cfg.train.preset, cfg.train.overrides)
    for name, folder in (
        ("odysseus", "pipeline"),
        ("gtr", "gtr_pipeline"),
        ("espo", "espo_pipeline"),
    ):
        moved = Path("configs") / folder / "tiny.yaml"
        with pytest.raises(
            FileNotFoundError, match=f"configs/{folder}/ moved to configs/{name}/pipeline/"
        ):
            RECIPES.get(name).load_pipeline(moved, None)

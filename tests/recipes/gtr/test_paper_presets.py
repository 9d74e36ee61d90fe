"""GTR's paper presets (``requires_base_model: true``) refuse to start without a base model:
the tiny offline model would only check the plumbing while the run pays for GPT-4o."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from odyssey_core.cli import main
from odyssey_core.config import config_dir
from odyssey_core.recipes.gtr import pipeline, train
from odyssey_core.recipes.gtr.pipeline import load_gtr_pipeline_config, stage_gtr_train
from odyssey_core.recipes.gtr.settings import load_gtr_settings
from odyssey_core.rl.train_settings import BaseModelRequiredError

GTR_CONFIGS = config_dir() / "gtr"
CPU_PRESETS = {"tiny.yaml", "alfworld_tiny.yaml"}
TRAINING_PRESETS = sorted(
    p.relative_to(GTR_CONFIGS).as_posix()
    for p in GTR_CONFIGS.rglob("*.yaml")
    if p.parent.name != "pipeline"
)


@pytest.mark.parametrize("preset", TRAINING_PRESETS)
def test_every_gtr_preset_at_paper_size_requires_a_base_model(preset: str) -> None:
    settings = load_gtr_settings(GTR_CONFIGS / preset)
    paper_size = settings.lora is not None and settings.model.device == "cuda"
    assert settings.requires_base_model == (preset not in CPU_PRESETS) == paper_size
    assert settings.model.path is None  # shipped without one: the user sets it
    if settings.requires_base_model:
        with pytest.raises(BaseModelRequiredError, match=r"model\.path is null.*set model\.path"):
            settings.check_base_model()
    else:
        settings.check_base_model()  # the tiny model, on purpose


def test_a_base_model_path_that_is_no_folder_is_named(tmp_path: Path) -> None:
    settings = load_gtr_settings("points24", {"model": {"path": str(tmp_path / "missing")}})
    with pytest.raises(BaseModelRequiredError, match=r"model\.path .*missing.* is not a folder"):
        settings.check_base_model()
    load_gtr_settings("points24", {"model": {"path": str(tmp_path)}}).check_base_model()


def _no_work(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{what} before the base model was checked")

    return refuse


def test_build_trainer_refuses_before_any_corrector_or_model(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a key is there: only the model is missing
    monkeypatch.setattr(train, "build_corrector", _no_work("a corrector was built"))
    monkeypatch.setattr(train, "build_policy", _no_work("a model was built"))
    for preset in ("points24", "alfworld"):
        with pytest.raises(BaseModelRequiredError, match=r"model\.path"):
            train.build_trainer(load_gtr_settings(preset), tmp_path / preset)
        assert not (tmp_path / preset).exists()


def test_the_paper_pipeline_refuses_before_its_first_stage(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr(pipeline, "run_stage", _no_work("a stage ran"))
    cfg = load_gtr_pipeline_config("points24", {"run_dir": str(tmp_path / "run")})
    assert cfg.sft.enabled  # the SFT stage would run first
    with pytest.raises(BaseModelRequiredError, match=r"train\.overrides\.model\.path is null"):
        stage_gtr_train(cfg)
    with pytest.raises(BaseModelRequiredError, match=r"train\.overrides\.model\.path"):
        pipeline.stage_gtr_sft(cfg)
    assert not (tmp_path / "run").exists()


def test_odyssey_train_refuses_a_paper_preset_without_a_base_model(tmp_path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["train", "--recipe", "gtr", "--preset", str(GTR_CONFIGS / "points24.yaml"), "--out", out],
    )
    assert result.exit_code != 0
    assert "model.path is null" in result.output and "requires_base_model" in result.output
    assert not (out / "base-model").exists()  # the tiny model was never built

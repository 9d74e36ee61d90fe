"""The ESPO pipeline: presets and the paper's variants, the stages end to end at toy size (data ->
SFT -> ESPO -> evaluate -> register) with their skip behaviour, the registered MLflow Model
answering on a persona screen, and the `train-espo` flow on a real (temporary) Prefect server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from odyssey_core.recipes.espo import pipeline
from odyssey_core.recipes.espo.pipeline import (
    EspoPipelineConfig,
    espo_sft_settings,
    load_espo_pipeline_config,
    sft_epochs,
    stage_espo_data,
    stage_espo_evaluate,
    stage_espo_register,
    stage_espo_sft,
    stage_espo_train,
    sweep_overlays,
)
from odyssey_core.recipes.espo.settings import load_espo_settings
from odyssey_core.stages import DONE_MARKER

torch.set_num_threads(1)

# the tiny pipeline, smaller still: two SFT steps, one epoch of ESPO over the 12 training
# episodes in two steps (8, then the epoch's last 4; two samples each, eight new tokens), short
# online episodes
SMALL: dict[str, Any] = {
    "sft": {"epochs": 1, "settings": {"max_steps": 2}},
    "train": {
        "overrides": {
            "rollout": {
                "samples_per_step": 2,
                "episodes_per_step": 8,
                "generation": {"max_new_tokens": 8},
                "history_window": 1,
            }
        }
    },
    "eval": {"online_max_steps": 3, "resamples": 100, "generation": {"max_new_tokens": 8}},
}


def small(run_dir: Path, **extra: Any) -> EspoPipelineConfig:
    return load_espo_pipeline_config("tiny", {"run_dir": str(run_dir), **SMALL, **extra})


def test_presets_variants_and_sweep_load() -> None:
    tiny = load_espo_pipeline_config("tiny")
    assert tiny.game == "espo-all-tiny" and tiny.eval.splits == ["val", "test"]
    travel = load_espo_pipeline_config("travel")
    paper = load_espo_settings(travel.train.preset)
    assert (paper.epochs, paper.advantage.k, paper.advantage.w) == (6, 1.0, 1.0)
    # one episode per optimiser step; four per rollout batch (our choice, docs/paper_map.md)
    assert (paper.rollout.episodes_per_step, paper.ppo.minibatch_size) == (4, 1)
    assert paper.data.preset == "smartspot_like" and travel.sft.epochs == 1

    def variant(name: str) -> tuple[EspoPipelineConfig, Any]:
        cfg = load_espo_pipeline_config("travel", variant=name)
        return cfg, load_espo_settings(cfg.train.preset, cfg.train.overrides)

    cfg, s = variant("sft_only")
    assert not cfg.train.enabled and cfg.sft.enabled and cfg.sft.epochs == 1
    cfg, s = variant("all_sft")
    assert not cfg.train.enabled and sft_epochs(cfg) == 1 + paper.epochs
    cfg, s = variant("vanilla_grpo")
    assert (s.advantage.estimator, s.ppo.sampler) == ("grpo_step", "shuffled_turns_equal_steps")
    assert variant("no_cout")[1].advantage.w == 0.0
    assert not variant("no_sft")[0].sft.enabled
    cfg, s = variant("no_all")
    assert not cfg.sft.enabled and s.advantage.w == 0.0
    assert not variant("no_phi")[1].advantage.use_phi
    assert not variant("no_psi")[1].advantage.use_psi
    assert variant("espo")[1] == paper
    with pytest.raises(FileNotFoundError, match="variants: all_sft"):
        load_espo_pipeline_config("tiny", variant="no_such")
    # a mistyped SFT field fails when the pipeline loads, naming the field, not at the SFT stage
    with pytest.raises(ValueError, match="epoch"):
        load_espo_pipeline_config("tiny", {"sft": {"settings": {"epoch": 1}}})
    cold_start = espo_sft_settings(travel)  # ESPO's own batch and lr over the shared defaults
    assert (cold_start.lr, cold_start.batch_size, cold_start.lr_scheduler) == (1e-5, 16, "cosine")
    cells = sweep_overlays()
    assert len(cells) == 9 and cells["epochs9-k2"]["train"]["overrides"] == {
        "epochs": 9,
        "advantage": {"k": 2.0},
    }


def run_all(cfg: EspoPipelineConfig) -> dict[str, dict[str, Any]]:
    out = {"data": stage_espo_data(cfg)}
    out["sft"] = stage_espo_sft(cfg, out["data"])
    out["train"] = stage_espo_train(cfg, out["data"], out["sft"])
    checkpoint = out["train"]["checkpoint_uri"]
    out["evaluate"] = stage_espo_evaluate(
        cfg, out["data"], checkpoint, training_run_id=out["train"]["mlflow_run_id"]
    )
    out["register"] = stage_espo_register(
        cfg, out["data"], checkpoint, out["evaluate"], out["train"]["base_model"]
    )
    return out


@pytest.mark.slow
def test_stages_end_to_end_skip_on_rerun_and_the_registered_model_answers(
    tmp_path: Path,
) -> None:
    import mlflow
    import pandas as pd

    from odyssey_core.envs.persona.env import PersonaEnv
    from odyssey_core.registry.models import ModelRegistry
    from odyssey_core.registry.pyfunc import encode_frame

    cfg = small(tmp_path / "run")
    first = run_all(cfg)
    assert first["data"]["episodes_train"] == 12 and first["sft"]["steps"] == 2
    assert first["train"]["steps"] == 2  # the second, shorter step plays the last 4 episodes
    report_path = Path(first["evaluate"]["report_markdown"])
    report = report_path.read_text()
    for column in ("EleAcc", "Op F1", "Step SR", "RecAcc", "always_no", "first_item"):
        assert column in report
    assert "Best achievable RecAcc: " in report  # the ceiling under the table
    # the bar plot, one video per live episode (two at most), the training curves
    pictures = {p.name for p in report_path.parent.iterdir()}
    assert {"metrics.png", "live-0.mp4", "live-1.mp4", "training.png"} <= pictures
    for name in ("metrics.png", "live-0.mp4", "training.png"):
        assert name in report
    scores = json.loads(Path(first["evaluate"]["scores_path"]).read_text())
    assert len(scores["scores"]) == 2  # val + test episodes: the gate's sample
    assert first["register"]["version"] == 1 and first["register"]["reference"] == "base"

    markers = {s: (cfg.run_dir / s / DONE_MARKER).stat().st_mtime_ns for s in first}
    assert run_all(cfg) == first  # every stage answered from its done marker
    assert markers == {s: (cfg.run_dir / s / DONE_MARKER).stat().st_mtime_ns for s in first}

    registry = ModelRegistry(cfg.mlflow_uri)
    name = registry.model_name(cfg.game)
    alias = "champion" if first["register"]["promoted"] else "candidate"
    mlflow.set_tracking_uri(cfg.mlflow_uri)
    try:
        model = mlflow.pyfunc.load_model(f"models:/{name}@{alias}")
    finally:  # the tracking URI is process-global: later tests must not inherit it
        mlflow.set_tracking_uri(None)
    env = PersonaEnv(dataset=first["data"]["dataset_path"], split="test")
    observation, _ = env.reset()
    answer = model.predict(
        pd.DataFrame([{"image": encode_frame(observation.image), "text": observation.text}]),
        params={"max_new_tokens": 8},
    )
    assert list(answer.columns) == ["action", "valid", "text", "recipe"]
    assert answer.loc[0, "recipe"] == "espo"
    env.close()


def test_sft_only_registers_the_sft_model(tmp_path: Path, monkeypatch) -> None:
    """Without a train stage the flow evaluates and registers the SFT model; the train stage
    is never built (a monkeypatched trainer would fail the test)."""
    cfg = small(tmp_path / "run", train={"enabled": False})
    monkeypatch.setattr(
        "odyssey_core.recipes.espo.train.build_trainer",
        lambda *a, **k: pytest.fail("the SFT-only variant must not train ESPO"),
    )
    assert not cfg.train.enabled
    data = stage_espo_data(cfg)
    sft = stage_espo_sft(cfg, data)
    evaluation = stage_espo_evaluate(cfg, data, sft["model_uri"])
    assert evaluation["format_valid"] is not None
    assert pipeline.ESPO_STAGES == ("data", "sft", "train", "evaluate", "register")


@pytest.mark.slow
def test_train_espo_flow_on_a_prefect_server(prefect_server, tmp_path: Path) -> None:
    from flows.espo import train_espo_flow

    # the stages are checked end to end above; here one short step (two episodes) is enough
    train = SMALL["train"]["overrides"]
    short = {
        "overrides": {**train, "steps": 1, "rollout": {**train["rollout"], "episodes_per_step": 2}}
    }
    overrides = {"run_dir": str(tmp_path / "run"), **SMALL, "train": short}
    result = train_espo_flow(preset="tiny", overrides=overrides, variant="vanilla_grpo")
    assert set(result) == {"data", "sft", "train", "evaluate", "register"}
    assert result["register"]["version"] == 1
    settings = json.loads(
        next((tmp_path / "run" / "train").glob("run-*/checkpoints/*/config.json")).read_text()
    )
    assert settings["advantage"]["estimator"] == "grpo_step"

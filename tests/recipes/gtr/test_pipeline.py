"""The GTR pipeline: presets, GTR-format collapse metrics, the stages end to end at toy size with
their skip/rerun behaviour, the promotion gate against base then champion, and the `train-gtr`
flow on a real (temporary) Prefect server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import model_fixtures
import pytest
import torch

from odyssey_core.recipes.gtr import pipeline
from odyssey_core.recipes.gtr.pipeline import (
    GTRPipelineConfig,
    gtr_sft_settings,
    load_gtr_pipeline_config,
    read_provenance,
    stage_gtr_evaluate,
    stage_gtr_register,
    stage_gtr_train,
)
from odyssey_core.stages import DONE_MARKER

torch.set_num_threads(1)  # tiny models on a busy machine (see tests/model_fixtures.py)
tiny_model_dir = model_fixtures.tiny_model_dir

# the tiny preset, smaller still: one update, four evaluation episodes
SMALL = {"train": {"overrides": {"steps": 1}}, "eval": {"episodes": 4, "n_envs": 2}}


def small(run_dir: Path, **extra: Any) -> GTRPipelineConfig:
    return load_gtr_pipeline_config("tiny", {"run_dir": str(run_dir), **SMALL, **extra})


def stage_runs(cfg: GTRPipelineConfig) -> list[Any]:
    from mlflow import MlflowClient

    client = MlflowClient(cfg.mlflow_uri)
    experiment = client.get_experiment_by_name(cfg.experiment)
    return list(client.search_runs([experiment.experiment_id], "tags.`odyssey.stage` != ''"))


def run_all(cfg: GTRPipelineConfig) -> dict[str, dict[str, Any]]:
    out = {"train": stage_gtr_train(cfg)}
    out["evaluate"] = stage_gtr_evaluate(cfg, out["train"]["checkpoint_uri"])
    out["register"] = stage_gtr_register(
        cfg, out["train"]["checkpoint_uri"], out["evaluate"], out["train"]["base_model"]
    )
    return out


def test_presets_load_and_name_the_registered_model() -> None:
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    tiny = load_gtr_pipeline_config("tiny")
    assert tiny.game == "gtr-numberline" and tiny.train.preset == "tiny"
    assert load_gtr_settings(tiny.train.preset).rollout.env == "cards-numberline"
    paper = load_gtr_pipeline_config("points24")
    assert paper.game == "gtr-points24" and paper.eval.episodes == 200
    # GTR starts from an SFT-initialised model (App. B): one epoch, solver-annotated episodes
    assert paper.sft.enabled and paper.sft.corrector == "programmatic"
    assert gtr_sft_settings(paper).epochs == 1 and not tiny.sft.enabled
    with pytest.raises(ValueError):
        load_gtr_pipeline_config("tiny", {"sft": {"settings": {"epoch": 1}}})  # a typo
    with pytest.raises(ValueError):
        load_gtr_pipeline_config("tiny", {"sft": {"corrector": "none"}})
    settings = load_gtr_settings(paper.train.preset)
    assert settings.rollout.env == "cards-points24" and settings.lora is not None
    assert paper.store_uri.startswith("file://") and paper.mlflow_uri.startswith("sqlite:///")
    with pytest.raises(ValueError):
        load_gtr_pipeline_config("tiny", {"typo": 1})
    with pytest.raises(ValueError):
        load_gtr_pipeline_config("tiny", {"promotion": {"metric": "progress"}})
    with pytest.raises(FileNotFoundError, match="points24"):  # the error lists the presets
        load_gtr_pipeline_config("nope")


def test_collapse_metrics_read_the_gtr_answer_format() -> None:
    from odyssey_core.recipes.gtr.evaluation import action_words, gtr_collapse_metrics

    legal = ["+", "-"]
    texts = [
        '"target": 3, "current": 1, "thoughts": "add one to go up",\n"action": "+"',  # agrees
        '"target": 3, "current": 1, "thoughts": "add one to go up",\n"action": "+"',  # dup
        '"target": 0, "current": 2, "thoughts": "go down",\n"action": "+"',  # disagrees
        "no action here",  # invalid
    ]
    report = gtr_collapse_metrics(texts, ["f1", "f2", "f3", "f4"], [legal] * 4)
    m = report.metrics
    assert m["valid_rate"] == 0.75
    assert m["agreement"] == pytest.approx(2 / 3)  # "add"/"up" name '+'; "down" does not
    assert m["duplicate_share"] == pytest.approx(2 / 4)  # the same thought for f1 and f2
    with pytest.raises(ValueError):
        gtr_collapse_metrics(texts, ["f1"], [legal] * 4)
    # the corrector's way of naming an operator, in quotes, counts; a quoted formula does not
    said = '"thoughts": "3 is above 2, so I press \'-\'.",\n"action": "-"'
    formula = '"thoughts": "it can become \'10+2\', next is \'10\'",\n"action": "+"'
    quoted = gtr_collapse_metrics([said, formula], ["f1", "f2"], [legal, ["10", "2", "+", "="]])
    assert quoted.metrics["agreement"] == 0.5
    # numbers and one-word actions name themselves; a phrase by its content words
    assert action_words("10") == ("10",) and action_words("stand") == ("stand",)
    assert action_words("go to fridge 1") == ("fridge",)
    assert action_words("take apple 1 from countertop 2") == ("take", "apple", "countertop")


def test_stages_end_to_end_then_skip_and_rerun_on_change(tmp_path: Path) -> None:
    from odyssey_core.registry.artifacts import open_store
    from odyssey_core.registry.models import ModelRegistry

    cfg = small(tmp_path / "run")
    first = run_all(cfg)

    store = open_store(cfg.store_uri)
    for uri in (first["train"]["checkpoint_uri"], first["train"]["base_model"]):
        assert f"/runs/{cfg.run_key}/train/" in uri
        assert store.read_manifest(store.key_for(uri)).files
    for uri in (first["evaluate"]["scores_uri"], first["evaluate"]["report_uri"]):
        assert store.exists(store.key_for(uri))
    ev = first["evaluate"]
    assert ev["episodes"] == 4 and 0.0 <= ev["success_rate"] <= 1.0
    assert {"success_se", "mean_return", "return_se", "collapse/valid_rate"} <= set(ev)
    # the stage's scores file holds the gate's sample (promotion.metric: return); the
    # evaluation's own, beside its report folder, the deal seeds as well
    recorded = json.loads(Path(ev["scores_path"]).read_text())
    scores = json.loads((Path(ev["report_markdown"]).parent.parent / "scores.json").read_text())
    assert len(scores["returns"]) == 4 and scores["seeds"] == [cfg.eval.seed + k for k in range(4)]
    assert recorded["scores"] == scores["returns"] == recorded["rows"]["candidate"]["scores"]
    report = Path(ev["report_markdown"]).read_text()
    assert "success rate" in report
    # the report says which corrector trained the model, and that this one is an oracle
    assert "`programmatic`: an oracle" in report and "**Oracle corrector**" in report
    assert "Not SFT-initialised" in report  # the tiny pipeline skips the SFT stage
    assert (ev["corrector"], ev["corrector_oracle"]) == ("programmatic", True)
    assert (first["train"]["corrector"], first["train"]["sft_model"]) == ("programmatic", None)

    registry = ModelRegistry(cfg.mlflow_uri)
    decision = first["register"]
    name = registry.model_name("gtr-numberline")
    assert decision["model_name"] == name and decision["version"] == 1
    assert decision["reference"] == "base" and decision["reason"]
    mv = registry.client.get_model_version(name, "1")
    assert mv.tags["checkpoint_uri"] == first["train"]["checkpoint_uri"]
    assert mv.source.endswith("/model")  # an MLflow Model made from that checkpoint
    assert {"metric.eval.success_rate", "metric.eval.mean_return"} <= set(mv.tags)
    assert mv.tags["odyssey.corrector"] == "programmatic"
    assert mv.tags["odyssey.corrector_oracle"] == "true"
    assert mv.tags["promotion.decision"] == ("promoted" if decision["promoted"] else "rejected")
    if decision["promoted"]:
        assert registry.champion("gtr-numberline") == 1
    else:
        assert registry.candidate("gtr-numberline") == 1
        assert registry.champion("gtr-numberline") is None

    runs = {r.data.tags["odyssey.stage"]: r for r in stage_runs(cfg)}
    assert set(runs) == {"train", "evaluate", "register"}
    assert runs["train"].data.metrics["steps"] == 1
    assert "collapse/valid_rate" in runs["train"].data.metrics  # per-step training metrics
    assert "eval.success_rate" in runs["evaluate"].data.metrics

    # the same inputs again: nothing reruns, nothing new is logged or registered
    markers = {s: (cfg.run_dir / s / DONE_MARKER).stat().st_mtime_ns for s in first}
    assert run_all(cfg) == json.loads(json.dumps(first))
    assert markers == {s: (cfg.run_dir / s / DONE_MARKER).stat().st_mtime_ns for s in first}
    assert len(stage_runs(cfg)) == 3
    assert len(registry.client.search_model_versions(f"name='{name}'")) == 1

    # a changed evaluation reruns evaluation only
    more = small(tmp_path / "run", eval={"episodes": 5, "n_envs": 2})
    assert stage_gtr_evaluate(more, first["train"]["checkpoint_uri"])["episodes"] == 5
    assert stage_gtr_train(more) == first["train"]


# -- the SFT initialisation ----------------------------------------------------------------------


def test_sft_data_is_oracle_annotated_card_episodes(tmp_path: Path) -> None:
    from odyssey_core.protocol.gtr_format import parse_gtr_response
    from odyssey_core.recipes.gtr.corrector import make_corrector
    from odyssey_core.recipes.gtr.sft_data import collect_corrector_episodes
    from odyssey_core.sft.data import SFTDataset

    out = collect_corrector_episodes(
        "cards-points24",
        {"only_solvable": True},
        make_corrector("programmatic"),
        tmp_path / "data",
        episodes=3,
        seed=5,
        val_share=0.0,
    )
    rows = SFTDataset(out.dataset_dir, split="train").samples
    assert out.samples == len(rows) > 3 and out.counts["episodes"] == 3
    legal = [str(n) for n in range(1, 11)] + ["+", "-", "*", "/", "(", ")", "="]
    for row in rows:
        parsed = parse_gtr_response(row.response, legal)
        assert parsed.valid and (parsed.action,) == row.buttons
        assert row.game == "points24" and '"cards": [' in parsed.thought
        assert row.image().shape == (320, 480, 3)
    # following the oracle, every episode is typed to the end: one "=" per episode
    assert sum(row.buttons == ("=",) for row in rows) == 3


def test_sft_trains_the_prompts_rl_samples(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The SFT collator, given GTR's system prompt, encodes a row exactly as the GTR policy
    encodes the same observation."""
    from odyssey_core.envs.base import Observation
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.recipes.gtr.corrector import make_corrector
    from odyssey_core.recipes.gtr.prompts import gtr_system_prompt
    from odyssey_core.recipes.gtr.sft_data import collect_corrector_episodes
    from odyssey_core.sft.data import SFTCollator, SFTDataset

    env = "cards-numberline"
    data = collect_corrector_episodes(
        env, {}, make_corrector("programmatic"), tmp_path / "d", episodes=1, seed=0, val_share=0
    )
    row = SFTDataset(data.dataset_dir).samples[0]
    policy = HFPolicy.for_evaluation(tiny_model_dir, gtr_system_prompt(env), image_size=(96, 64))
    assert not policy.model.training and policy.system_prompt == gtr_system_prompt(env)
    collator = SFTCollator(
        policy.processor, image_size=(96, 64), system_prompts={"numberline": gtr_system_prompt(env)}
    )
    inputs, _ = policy.encode([Observation(image=row.image(), text=row.turn_text)])
    ids = inputs["input_ids"][0][inputs["attention_mask"][0].bool()]
    assert torch.equal(collator.encode_prompt(row)["input_ids"][0], ids)


@pytest.mark.slow
def test_train_stage_runs_the_sft_stage_first_and_starts_from_its_model(tmp_path: Path) -> None:
    from odyssey_core.models.loading import load_model
    from odyssey_core.registry.artifacts import open_store

    sft = {
        "enabled": True,
        "episodes": 2,
        "settings": {"max_steps": 2, "batch_size": 2, "grad_accum_steps": 1},
    }
    cfg = small(tmp_path / "run", sft=sft)
    out = stage_gtr_train(cfg)
    assert out["sft_model"] and f"/runs/{cfg.run_key}/sft/" in out["sft_model"]
    assert f"/runs/{cfg.run_key}/sft/" in out["base_model"]  # the model before SFT and RL
    runs = {r.data.tags["odyssey.stage"] for r in stage_runs(cfg)}
    assert runs == {"sft", "train"}
    store = open_store(cfg.store_uri)
    model = store.get_dir(store.key_for(out["checkpoint_uri"]), tmp_path / "model")
    provenance = read_provenance(model)
    assert provenance["sft"]["corrector"]["oracle"] and provenance["sft"]["samples"] > 0
    # RL trained the SFT model, not the base: the SFT weights are the run's starting point
    sft_dir = store.get_dir(store.key_for(out["sft_model"]), tmp_path / "sft-model")
    base_dir = store.get_dir(store.key_for(out["base_model"]), tmp_path / "base")
    checkpoints = sorted((cfg.run_dir / "train").glob("run-*/checkpoints/step-*"))
    config = json.loads((checkpoints[-1] / "config.json").read_text())
    assert "sft-model" in json.dumps(config)
    sft_w, base_w = load_model(sft_dir).state_dict(), load_model(base_dir).state_dict()
    assert any(not torch.equal(sft_w[k], base_w[k]) for k in sft_w)
    evaluated = stage_gtr_evaluate(cfg, out["checkpoint_uri"])
    assert "SFT-initialised: 1 epoch(s)" in Path(evaluated["report_markdown"]).read_text()
    assert stage_gtr_train(cfg) == json.loads(json.dumps(out))  # both stages cached


def test_a_lora_run_publishes_a_merged_model(tmp_path: Path) -> None:
    """The points24 preset trains LoRA: the published checkpoint must load without PEFT."""
    from odyssey_core.models.loading import load_model
    from odyssey_core.registry.artifacts import open_store

    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "include_vision": False}
    cfg = small(tmp_path / "run", train={"overrides": {"steps": 1, "lora": lora}})
    out = stage_gtr_train(cfg)
    store = open_store(cfg.store_uri)
    model_dir = store.get_dir(store.key_for(out["checkpoint_uri"]), tmp_path / "model")
    assert not (model_dir / "adapter_config.json").exists()
    assert (model_dir / "config.json").is_file()
    load_model(model_dir)  # a plain checkpoint


def _fake_eval(scores_by_label: dict[str, list[float]]):
    def fake(cfg: GTRPipelineConfig, model_ref: str, label: str, out_dir: Path) -> dict:
        returns = scores_by_label[label]
        summary = {"success_rate": 0.5, "mean_return": sum(returns) / len(returns)}
        report = out_dir / "report" / "report.md"  # where the real one writes it
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(f"### GTR evaluation: {label}\n")
        return {
            "summary": summary,
            "scores": {"returns": returns, "successes": [0.0]},
            "report_markdown": str(report),
        }

    return fake


def test_gate_against_base_then_champion(tmp_path: Path, monkeypatch) -> None:
    from odyssey_core.registry.models import ModelRegistry

    cfg = small(tmp_path / "run")
    scores = {"base": [-3.0, -2.0, -2.5, -3.0], "champion": [1.0, 0.9, 1.0, 0.8]}
    monkeypatch.setattr(pipeline, "evaluate_gtr_model", _fake_eval(scores))
    good = tmp_path / "good.json"
    # the evaluate stage's scores file: the candidate's per-episode gate sample (returns)
    good.write_text(json.dumps({"scores": [1.0, 0.9, 1.0, 0.8]}))
    evaluation = {"scores_path": str(good), "success_rate": 1.0, "mean_return": 0.925}
    first = stage_gtr_register(cfg, "file:///ckpt/a", evaluation, "file:///base")
    assert first["promoted"] and first["reference"] == "base" and first["champion"] == 1

    # the next candidate is judged against the champion, here from a fresh run folder
    weak = tmp_path / "weak.json"
    weak.write_text(json.dumps({"scores": [-1.0, -2.0, -1.5, -1.0]}))
    shared = {"tracking_uri": cfg.mlflow_uri, "artifact_uri": cfg.store_uri}
    cfg2 = small(tmp_path / "run2", run_id="second", **shared)
    second = stage_gtr_register(cfg2, "file:///ckpt/b", {"scores_path": str(weak)}, "file:///x")
    assert not second["promoted"] and second["reference"] == "champion"
    assert second["reference_version"] == 1 and second["version"] == 2
    assert second["reference_mean"] == pytest.approx(0.925)
    registry = ModelRegistry(cfg.mlflow_uri)
    assert registry.champion("gtr-numberline") == 1 and registry.candidate("gtr-numberline") == 2


def _artifact_keys() -> set[str]:
    import asyncio

    from prefect.client.orchestration import get_client

    async def read() -> set[str]:
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    return asyncio.run(read())


@pytest.mark.slow
def test_train_gtr_flow_runs_registers_and_reruns_from_cache(
    prefect_server, tmp_path: Path
) -> None:
    from flows.gtr import train_gtr_flow
    from odyssey_core.registry.models import ModelRegistry

    overrides = {"run_dir": str(tmp_path / "run"), **SMALL}
    first = train_gtr_flow(preset="tiny", overrides=overrides)
    assert set(first) == {"train", "evaluate", "register"}
    assert first["register"]["version"] == 1
    assert "gtr-evaluation-gtr-numberline-tiny" in _artifact_keys()
    cfg = small(tmp_path / "run")
    registry = ModelRegistry(cfg.mlflow_uri)
    aliases = registry.client.get_registered_model(registry.model_name(cfg.game)).aliases
    expected = "champion" if first["register"]["promoted"] else "candidate"
    assert aliases == {expected: 1}

    markers = {s: (cfg.run_dir / s / DONE_MARKER).stat().st_mtime_ns for s in first}
    again = train_gtr_flow(preset="tiny", overrides=overrides)
    assert again == first
    assert markers == {s: (cfg.run_dir / s / DONE_MARKER).stat().st_mtime_ns for s in first}
    versions = registry.client.search_model_versions(f"name='{registry.model_name(cfg.game)}'")
    assert len(versions) == 1
    nested = [r for r in stage_runs(cfg) if r.data.tags.get("mlflow.parentRunId")]
    assert len(nested) == 3  # the rerun's stages came from the cache: no new stage runs

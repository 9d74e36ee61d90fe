"""The pipeline stages end to end at toy sizes, their resume/skip behaviour, the promotion and
nightly paths, the retry condition, and the `train-odysseus` flow on a real Prefect server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from odyssey_core.common.run_folder import checkpoint_name
from odyssey_core.recipes.odysseus import pipeline
from odyssey_core.recipes.odysseus.pipeline import (
    CURATE_STAGES,
    DONE_MARKER,
    PipelineConfig,
    load_pipeline_config,
    stage_curate,
    stage_evaluate,
    stage_promote,
    stage_rl,
    stage_sft,
)

CURATION_TASKS = ("record-walkthroughs", "sample-frames", "annotate", "validate", "build-dataset")


def tiny(run_dir: Path) -> PipelineConfig:
    # configs/odysseus/pipeline/tiny.yaml is already minimal: 20 frames, 4 SFT steps, 1 RL step,
    # 2 eval runs of 3 turns
    return load_pipeline_config("tiny", {"run_dir": str(run_dir)})


def run_all(cfg: PipelineConfig) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    out["curate"] = stage_curate(cfg)
    out["sft"] = stage_sft(cfg, out["curate"]["dataset_uri"])
    out["rl"] = stage_rl(cfg, out["sft"]["model_uri"])
    out["evaluate"] = stage_evaluate(cfg, out["rl"]["checkpoint_uri"])
    out["promote"] = stage_promote(
        cfg, out["rl"]["checkpoint_uri"], out["evaluate"], out["sft"]["base_model_uri"]
    )
    return out


def markers(cfg: PipelineConfig) -> dict[str, int]:
    """stage folder (relative to the run) -> its done marker's mtime."""
    return {
        str(p.parent.relative_to(cfg.run_dir)): p.stat().st_mtime_ns
        for p in cfg.run_dir.rglob(DONE_MARKER)
    }


def stage_runs(cfg: PipelineConfig) -> list[Any]:
    from mlflow import MlflowClient

    client = MlflowClient(cfg.mlflow_uri)
    experiment = client.get_experiment_by_name(cfg.experiment)
    return list(client.search_runs([experiment.experiment_id], "tags.`odyssey.stage` != ''"))


def test_presets_load() -> None:
    tiny_cfg = load_pipeline_config("tiny")
    assert tiny_cfg.game == "odland" and tiny_cfg.eval.runs == 2
    paper = load_pipeline_config("paper")
    assert paper.game == "mario" and paper.train.preset == "paper"
    assert paper.store_uri.startswith("file://") and paper.mlflow_uri.startswith("sqlite:///")
    with pytest.raises(ValueError):
        load_pipeline_config("tiny", {"typo": 1})
    # `make demo` prints where this preset's run lives: out/pipeline/odland-<preset>
    demo = load_pipeline_config("demo")
    assert demo.run_dir == Path("out/pipeline/odland-demo") and demo.sft.overrides["max_steps"]


def test_stages_end_to_end_then_skip(tmp_path: Path) -> None:
    from odyssey_core.registry.artifacts import open_store
    from odyssey_core.registry.models import ModelRegistry

    cfg = tiny(tmp_path / "run")
    first = run_all(cfg)

    # every output is a URI into the run-scoped prefix of the store, and complete there
    store = open_store(cfg.store_uri)
    curate = first["curate"]
    uris = [
        curate["walkthroughs_uri"],
        curate["samples_uri"],
        curate["annotations_uri"],
        curate["validation_uri"],
        curate["dataset_uri"],
        first["sft"]["model_uri"],
        first["sft"]["base_model_uri"],
        first["rl"]["checkpoint_uri"],
        first["evaluate"]["report_uri"],
    ]
    for uri in uris:
        assert f"/runs/{cfg.run_key}/" in uri
        assert store.read_manifest(store.key_for(uri)).files
    assert store.exists(store.key_for(first["evaluate"]["scores_uri"]))
    assert first["evaluate"]["episodes"] == 2
    assert curate["num_samples"] == 20
    # each curation stage has its own marker, under <run_dir>/curate/<stage>/
    curate_dirs = {f"curate/{stage}" for stage in CURATE_STAGES}
    assert set(markers(cfg)) == curate_dirs | {"sft", "rl", "evaluate", "promote"}
    # a stage reads its input from the store: the sample stage's fetched walkthrough records
    # point at its own copies, not at the record stage's folder
    fetched = cfg.run_dir / "curate" / "sample" / "out" / "walkthroughs"
    record = json.loads(next(fetched.glob("*.json")).read_text())
    assert Path(record["video"]).parent == fetched.resolve()

    # the registry: version 1 points at the checkpoint, with metrics and the gate's decision
    registry = ModelRegistry(cfg.mlflow_uri)
    decision = first["promote"]
    assert decision["version"] == 1 and decision["reference"] == "base" and decision["reason"]
    mv = registry.client.get_model_version(registry.model_name("odland"), "1")
    assert mv.tags["checkpoint_uri"] == first["rl"]["checkpoint_uri"]
    assert mv.source.endswith("/model")  # an MLflow Model made from that checkpoint
    assert mv.tags["checkpoint_uri"] == first["rl"]["checkpoint_uri"]
    assert "metric.eval.mean_progress" in mv.tags
    assert mv.tags["promotion.decision"] == ("promoted" if decision["promoted"] else "rejected")
    if decision["promoted"]:
        assert registry.champion("odland") == 1
    else:
        assert registry.candidate("odland") == 1 and registry.champion("odland") is None

    # MLflow: one nested run per stage, with params, metrics and the small artifacts
    runs = {r.data.tags["odyssey.stage"]: r for r in stage_runs(cfg)}
    assert set(runs) == {*CURATE_STAGES, "sft", "rl", "evaluate", "promote"}
    assert runs["sft"].data.metrics["steps"] == 4 and runs["rl"].data.metrics["steps"] == 1
    recorded = runs["record"].data.metrics
    assert recorded["frames.1-1"] == recorded["frames"] > 0 and recorded["walkthroughs"] == 1
    assert runs["sample"].data.metrics["frames_in"] == recorded["frames"]
    assert runs["sample"].data.metrics["frames_kept.1-1"] == 20
    assert runs["annotate"].data.metrics["annotated"] == 20
    assert runs["validate"].data.metrics["passed"] == 20
    assert runs["validate"].data.metrics["quarantined"] == 0
    assert runs["build-dataset"].data.metrics["samples.1-1"] == 20
    assert runs["build-dataset"].data.tags["dataset.sft"] == first["curate"]["dataset_uri"]

    def files(stage: str) -> set[str]:
        return {a.path for a in registry.client.list_artifacts(runs[stage].info.run_id)}

    assert "datasets" in files("build-dataset") and "reports" in files("validate")

    # a second call with the same inputs: markers untouched, nothing logged or registered
    before = markers(cfg)
    second = run_all(cfg)
    assert second == json.loads(json.dumps(first))
    assert markers(cfg) == before
    assert len(stage_runs(cfg)) == 9
    assert len(registry.client.search_model_versions(f"name='{mv.name}'")) == 1

    # changed inputs rerun that stage: one more eval run with the other runs untouched
    more = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"runs": 3})})
    assert stage_evaluate(more, first["rl"]["checkpoint_uri"])["episodes"] == 3
    assert stage_rl(more, first["sft"]["model_uri"]) == first["rl"]

    # a lost annotate marker: annotate reruns and republishes, so validate and build rerun
    # (their inputs' publication changed); record and sample are not touched
    before = markers(cfg)
    (cfg.run_dir / "curate" / "annotate" / DONE_MARKER).unlink()
    assert stage_curate(cfg) == second["curate"]
    after = markers(cfg)
    rerun = {d for d in curate_dirs if after[d] != before[d]}
    assert rerun == {"curate/annotate", "curate/validate", "curate/build-dataset"}
    assert len(stage_runs(cfg)) == 9 + 1 + 3  # the evaluate above, then three curation runs

    # a retrained SFT model (same URI, new publication) trains RL from scratch, not resumed
    # from the old run's checkpoint, and publishes under a new key: version 1 keeps its weights
    sft_dir = cfg.run_dir / "sft"
    (sft_dir / DONE_MARKER).unlink()
    sft_again = stage_sft(cfg, first["curate"]["dataset_uri"])
    assert sft_again["model_uri"] == first["sft"]["model_uri"]
    old_checkpoint = store.read_manifest(store.key_for(first["rl"]["checkpoint_uri"]))
    state = cfg.run_dir / "rl" / "train" / "checkpoints" / checkpoint_name(1) / "trainer_state.pt"
    old_state = state.stat().st_mtime_ns
    rl_again = stage_rl(cfg, sft_again["model_uri"])
    assert rl_again["checkpoint_uri"] != first["rl"]["checkpoint_uri"]
    assert rl_again["steps"] == 1 and state.stat().st_mtime_ns != old_state  # trained anew
    assert store.read_manifest(store.key_for(mv.tags["checkpoint_uri"])) == old_checkpoint


def _fake_eval(scores_by_label: dict[str, list[float]]):
    def fake(
        cfg: PipelineConfig, model_uri: str, label: str, out_dir: Path, **_: Any
    ) -> dict[str, Any]:
        scores = scores_by_label[label]
        (out_dir / "report").mkdir(parents=True, exist_ok=True)  # what the real one writes
        (out_dir / "report" / "report.md").write_text(f"# {label}\n")
        return {
            "scores": scores,
            "mean": sum(scores) / len(scores),
            "metrics": {},
            "report_dir": str(out_dir / "report"),
            "report_markdown": str(out_dir / "report" / "report.md"),
        }

    return fake


def test_promotion_against_base_then_champion_and_nightly(tmp_path: Path, monkeypatch) -> None:
    from odyssey_core.registry.models import ModelRegistry

    cfg = tiny(tmp_path / "run")
    scores = {"base": [0.0, 1.0, 0.5, 0.2], "champion": [10.0, 11.0, 10.5, 9.5]}
    monkeypatch.setattr(pipeline, "evaluate_checkpoint", _fake_eval(scores))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"scores": [10.0, 11.0, 10.0, 9.0]}))
    # what the evaluate stage returns: its scores file and the candidate's mean progress
    evaluated = {"scores_path": str(good), "mean_progress": 10.0, "episodes": 4}
    first = stage_promote(cfg, "file:///ckpt/a", evaluated, "file:///base")
    assert first["promoted"] and first["reference"] == "base" and first["champion"] == 1

    # the second model is judged against the champion, here on a fresh run folder
    weak = tmp_path / "weak.json"
    weak.write_text(json.dumps({"scores": [1.0, 2.0, 1.5, 1.0]}))
    shared = {"tracking_uri": cfg.mlflow_uri, "artifact_uri": cfg.store_uri}
    cfg2 = cfg.model_copy(update={"run_dir": tmp_path / "run2", "run_id": "second", **shared})
    evaluated = {"scores_path": str(weak), "mean_progress": 1.375, "episodes": 4}
    second = stage_promote(cfg2, "file:///ckpt/b", evaluated, "file:///base")
    assert not second["promoted"] and second["reference"] == "champion"
    assert second["reference_version"] == 1 and second["version"] == 2
    registry = ModelRegistry(cfg.mlflow_uri)
    assert registry.champion("odland") == 1 and registry.candidate("odland") == 2

    # nightly: the champion scores as recorded -> fine; far below -> regressed
    scores["champion"] = [10.0, 10.0]
    scores["candidate"] = [1.0, 1.0]
    ok = pipeline.nightly_evaluate(cfg, tmp_path / "n1")
    assert not ok["regressed"] and set(ok["evaluated"]) == {"champion", "candidate"}
    scores["champion"] = [0.0, 0.0]
    bad = pipeline.nightly_evaluate(cfg, tmp_path / "n2")
    assert bad["regressed"] and bad["recorded"] == pytest.approx(10.0)
    history = registry.client.get_metric_history(bad["mlflow_run_id"], "champion_mean")
    assert sorted((m.step, m.value) for m in history) == [(0, 10.0), (1, 0.0)]


def test_retry_condition_only_for_transient_errors() -> None:
    from botocore.exceptions import ClientError

    from odyssey_core.data.validation import ValidationFailed
    from odyssey_core.policy.openai_backend import OpenAIBackendError
    from tasks.common import is_transient_error

    def client_error(code: str, status: int) -> ClientError:
        return ClientError(
            {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
        )

    assert is_transient_error(ConnectionResetError())
    assert is_transient_error(TimeoutError())
    assert is_transient_error(client_error("SlowDown", 503))
    assert is_transient_error(client_error("InternalError", 500))
    assert is_transient_error(OpenAIBackendError("busy", status_code=429))
    assert is_transient_error(OpenAIBackendError("gave up", status_code=None))
    wrapped = RuntimeError("upload failed")
    wrapped.__cause__ = client_error("ThrottlingException", 400)
    assert is_transient_error(wrapped)
    assert not is_transient_error(client_error("NoSuchKey", 404))
    assert not is_transient_error(OpenAIBackendError("bad key", status_code=401))
    assert not is_transient_error(ValueError("bad config"))
    assert not is_transient_error(FileNotFoundError(2, "missing"))
    assert not is_transient_error(ValidationFailed("3 of 20 rows failed validation"))


def test_nightly_flow_fails_and_emits_on_regression(
    prefect_server, tmp_path: Path, monkeypatch
) -> None:
    from flows import nightly
    from odyssey_core.registry.models import ModelRegistry

    cfg = tiny(tmp_path / "run")
    registry = ModelRegistry(cfg.mlflow_uri)
    registry.register_checkpoint("file:///ckpt/a", "odland", metrics={"eval.mean_progress": 10.0})
    registry.promote("odland", [10.0, 11.0, 10.5], base_scores=[0.0, 0.5, 0.2])
    monkeypatch.setattr(pipeline, "evaluate_checkpoint", _fake_eval({"champion": [0.0, 0.0]}))
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(nightly, "emit_event", lambda **kw: events.append(kw))
    overrides = {"run_dir": str(cfg.run_dir)}
    with pytest.raises(nightly.ChampionRegressedError):
        nightly.nightly_eval_flow(preset="tiny", overrides=overrides)
    assert [e["event"] for e in events] == [nightly.REGRESSION_EVENT]
    assert events[0]["payload"]["recorded"] == 10.0


def _artifact_keys() -> set[str]:
    import asyncio

    from prefect.client.orchestration import get_client

    async def read() -> set[str]:
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    return asyncio.run(read())


def task_runs(flow_run_id: Any) -> dict[str, Any]:
    """task name -> its (only) task run in a flow run."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> list[Any]:
        async with get_client() as client:
            flow_runs = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            return await client.read_task_runs(flow_run_filter=flow_runs)

    runs = asyncio.run(read())
    by_name = {r.name.rsplit("-", 1)[0]: r for r in runs}  # run names are <task>-<suffix>
    assert len(by_name) == len(runs), [r.name for r in runs]
    return by_name


def test_curate_flow_fails_on_validation_without_retrying(prefect_server, tmp_path: Path) -> None:
    from flows.odysseus import curate_flow

    # every annotation's perception is far shorter than this: all rows fail validation
    bad = {"validation": {"perception_chars": [5000, 6000]}}
    overrides = {"run_dir": str(tmp_path / "run"), "curate": {"overrides": bad}}
    state = curate_flow(preset="tiny", overrides=overrides, return_state=True)
    assert state.is_failed()
    tasks = task_runs(state.state_details.flow_run_id)
    assert set(tasks) == set(CURATION_TASKS[:4]), "the dataset is never built"
    assert tasks["validate"].state.is_failed()
    assert tasks["validate"].run_count == 1, "ValidationFailed is not transient: no retry"
    cfg = load_pipeline_config("tiny", overrides)
    assert not (cfg.run_dir / "curate" / "validate" / DONE_MARKER).exists()
    # the failed MLflow stage run still carries the report that says why
    (validate,) = [r for r in stage_runs(cfg) if r.data.tags["odyssey.stage"] == "validate"]
    assert validate.info.status == "FAILED"
    assert validate.data.tags["validation.curate"] == "failed"
    assert validate.data.metrics["quarantined"] == validate.data.metrics["rows"] == 20


@pytest.mark.slow
def test_train_odysseus_flow_runs_and_reruns_from_cache(prefect_server, tmp_path: Path) -> None:
    from flows.odysseus import train_odysseus_flow
    from odyssey_core.registry.models import ModelRegistry

    overrides = {"run_dir": str(tmp_path / "run")}
    state = train_odysseus_flow(preset="tiny", overrides=overrides, return_state=True)
    first = state.result()
    assert first["promote"]["version"] == 1
    assert _artifact_keys() >= {"evaluation-odland-tiny"}, "the report is on the flow run"
    # one task run per stage, the five curation tasks first
    tasks = task_runs(state.state_details.flow_run_id)
    assert set(tasks) == {*CURATION_TASKS, "sft", "rl-train", "evaluate", "promote"}
    assert all(t.state.is_completed() for t in tasks.values())
    order = sorted(tasks, key=lambda name: tasks[name].start_time)
    assert order[:5] == list(CURATION_TASKS)
    assert first["build-dataset"]["num_samples"] == 20
    cfg = tiny(tmp_path / "run")
    # the full report: tables, the bar plot, the RL run's training curves, logged to MLflow
    report = Path(first["evaluate"]["report_markdown"])
    text = report.read_text()
    assert "![training curves](training_curves.png)" in text
    assert (report.parent / "training_curves.png").is_file()
    assert any(report.parent.glob("*.png")) and (report.parent / "report.html").is_file()
    evaluate_run = next(r for r in stage_runs(cfg) if r.info.run_name.endswith("evaluate"))
    client = ModelRegistry(cfg.mlflow_uri).client
    logged = {a.path for a in client.list_artifacts(evaluate_run.info.run_id, "report")}
    assert {"report/report.md", "report/report.html", "report/training_curves.png"} <= logged
    marker = (cfg.run_dir / "promote" / DONE_MARKER).stat().st_mtime_ns
    rerun = train_odysseus_flow(preset="tiny", overrides=overrides, return_state=True)
    again = rerun.result()
    assert again == first
    # the rerun's tasks all came from Prefect's input cache
    cached = task_runs(rerun.state_details.flow_run_id)
    assert {t.state.name for t in cached.values()} == {"Cached"}
    assert (cfg.run_dir / "promote" / DONE_MARKER).stat().st_mtime_ns == marker
    registry = ModelRegistry(cfg.mlflow_uri)
    name = registry.model_name("odland")
    assert len(registry.client.search_model_versions(f"name='{name}'")) == 1
    parents = [r for r in stage_runs(cfg) if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 9  # the rerun's stages came from the cache: no new stage runs

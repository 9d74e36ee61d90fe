"""The stage envelope on its own (skip on a matching marker, rerun on changed inputs, no marker
from a failing body, nesting under the flow's run), the one register-and-gate step, and the
generic evaluate / register / nightly stages over a recipe's ``evaluate_model``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from odyssey_core.recipe import Evaluation, ExampleInput, Recipe
from odyssey_core.stages import (
    DONE_MARKER,
    PromotionStage,
    RunConfig,
    Stage,
    StageContext,
    evaluate_stage,
    fetch,
    fingerprint,
    local_copy,
    nightly_stage,
    numeric,
    parent_run,
    read_marker,
    register_and_gate,
    register_stage,
    run_stage,
    run_store,
    training_dir,
)


def _cfg(tmp_path: Path) -> RunConfig:
    return RunConfig(name="envelope", run_dir=tmp_path / "run", experiment="odyssey/test")


def _publish(cfg: RunConfig, text: str) -> str:
    """An upstream stage's output folder, (re)published under the same URI."""
    folder = cfg.run_dir / "upstream-src"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.txt").write_text(text)
    return run_store(cfg, "upstream").put_dir(folder, "data")


def _stage_runs(cfg: RunConfig) -> list[Any]:
    from mlflow import MlflowClient

    client = MlflowClient(cfg.mlflow_uri)
    experiment = client.get_experiment_by_name(cfg.experiment)
    return list(client.search_runs([experiment.experiment_id], "tags.`odyssey.stage` != ''"))


class Consumer:
    """A stage body that reads its input, publishes a file and counts its calls."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.seen: list[str] = []

    def __call__(self, ctx: StageContext) -> dict[str, Any]:
        self.calls += 1
        data = ctx.fetch("data", ctx.work / "in") / "data.txt"
        self.seen.append(data.read_text())
        ctx.run.log_metrics({"chars": float(len(self.seen[-1]))})
        if self.fail:
            raise RuntimeError("the body broke")
        out = ctx.work / "out.txt"
        out.write_text(self.seen[-1].upper())
        uri = ctx.publish_file(out, "out.txt")
        ctx.keep(out)
        return {"out_uri": uri, "chars": len(self.seen[-1]), "tag": ctx.tag}


def _consume(cfg: RunConfig, body: Consumer, uri: str, size: int = 1) -> dict[str, Any]:
    return run_stage(
        cfg, "consume", body, config=[{"size": size}], inputs={"data": uri}, params={"size": size}
    )


def test_a_matching_marker_skips_the_stage_and_returns_its_recorded_result(
    tmp_path: Path,
) -> None:
    cfg = _cfg(tmp_path)
    uri = _publish(cfg, "abc")
    body = Consumer()
    first = _consume(cfg, body, uri)
    assert body.calls == 1 and first["chars"] == 3
    assert f"/runs/{cfg.run_key}/consume/" in first["out_uri"]
    store = run_store(cfg)
    assert store.exists(store.key_for(first["out_uri"]))
    marker = read_marker(cfg.run_dir / "consume")
    assert marker is not None and marker["outputs"] == first
    assert marker["local"] == [str(cfg.run_dir / "consume" / "out.txt")]
    mtime = (cfg.run_dir / "consume" / DONE_MARKER).stat().st_mtime_ns

    again = _consume(cfg, body, uri)
    assert again == first and body.calls == 1, "skipped: the body did not run"
    assert (cfg.run_dir / "consume" / DONE_MARKER).stat().st_mtime_ns == mtime
    (run,) = _stage_runs(cfg)  # no second stage run either
    assert run.data.params["size"] == "1" and run.data.metrics["chars"] == 3.0

    # a changed config section reruns; so does a lost local output the marker keeps
    assert _consume(cfg, body, uri, size=2)["tag"] != first["tag"] and body.calls == 2
    (cfg.run_dir / "consume" / "out.txt").unlink()
    _consume(cfg, body, uri, size=2)
    assert body.calls == 3 and len(_stage_runs(cfg)) == 3


def test_a_changed_input_publication_reruns_the_stage_on_the_new_copy(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    uri = _publish(cfg, "old")
    body = Consumer()
    first = _consume(cfg, body, uri)
    # the upstream stage reran: same URI, new publication
    assert _publish(cfg, "newer") == uri
    second = _consume(cfg, body, uri)
    assert body.calls == 2 and body.seen == ["old", "newer"], "the stale copy was replaced"
    assert second["tag"] != first["tag"] and second["chars"] == 5
    assert _consume(cfg, body, uri) == second and body.calls == 2


def test_a_failing_body_writes_no_marker_and_fails_its_stage_run(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    uri = _publish(cfg, "abc")
    broken = Consumer(fail=True)
    with pytest.raises(RuntimeError, match="the body broke"):
        _consume(cfg, broken, uri)
    assert not (cfg.run_dir / "consume" / DONE_MARKER).exists()
    (run,) = _stage_runs(cfg)
    assert run.info.status == "FAILED"
    assert run.data.tags["odyssey.error"] == "RuntimeError: the body broke"
    assert run.data.metrics["chars"] == 3.0, "what it logged before failing is kept"
    # the retry runs the body again (nothing recorded), and this time it is done
    fixed = Consumer()
    assert _consume(cfg, fixed, uri)["chars"] == 3 and fixed.calls == 1
    assert read_marker(cfg.run_dir / "consume") is not None


def test_stage_names_folders_prefixes_labels_and_nesting(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    stage = Stage("record", folder="curate/record", prefix="curate", label="rec")

    def body(ctx: StageContext) -> dict[str, Any]:
        assert ctx.work == cfg.run_dir / "curate" / "record"
        (ctx.work / "made").mkdir(exist_ok=True)
        (ctx.work / "made" / "x.txt").write_text("x")
        return {"uri": ctx.publish_dir(ctx.work / "made", "made", ref="made"), "key": ctx.key}

    with parent_run(cfg, "a-flow") as parent:
        out = run_stage(cfg, stage, body, config=[{"a": 1}], parent_run_id=parent)
    # the fingerprint is (label, run key, *config), without inputs
    assert out["key"] == fingerprint("rec", cfg.run_key, {"a": 1})
    assert out["uri"].endswith(f"/runs/{cfg.run_key}/curate/made")
    (run,) = _stage_runs(cfg)
    assert run.data.tags["odyssey.stage"] == "record"
    assert run.data.tags["mlflow.parentRunId"] == parent


def test_training_dir_resumes_only_for_the_same_inputs(tmp_path: Path) -> None:
    train = training_dir(tmp_path, "key-a")
    (train / "checkpoint").write_text("step 1")
    assert (training_dir(tmp_path, "key-a") / "checkpoint").is_file()
    assert not (training_dir(tmp_path, "key-b") / "checkpoint").exists()
    assert numeric({"a": 1, "b": True, "c": float("nan"), "d": "x", "e": 2.5}) == {
        "a": 1.0,
        "e": 2.5,
    }


def test_register_and_gate_against_base_then_champion(tmp_path: Path) -> None:
    from odyssey_core.registry.models import ModelRegistry

    cfg = _cfg(tmp_path)
    evaluated: list[tuple[str, str]] = []
    references = {"base": [0.0, 1.0, 0.5, 0.2], "champion": [10.0, 11.0, 10.5, 9.5]}

    def evaluate_reference(model: str, label: str, out_dir: Path) -> tuple[list[float], Any]:
        evaluated.append((model, label))
        return references[label], {"label": label}

    def gate(name: str, checkpoint: str, scores: list[float]) -> dict[str, Any]:
        def body(ctx: StageContext) -> dict[str, Any]:
            outcome = register_and_gate(
                ctx,
                game="toy",
                checkpoint_uri=checkpoint,
                candidate_scores=scores,
                base_model="file:///base",
                evaluate_reference=evaluate_reference,
                metrics={"eval.mean": sum(scores) / len(scores)},
                tags={"odyssey.pipeline_run": cfg.run_key},
            )
            assert outcome.reference_evaluation == {"label": outcome.reference}
            assert outcome.reference_scores == references[outcome.reference]
            return outcome.outputs()

        return run_stage(cfg, name, body, config=[checkpoint, scores])

    first = gate("promote-1", "file:///ckpt/a", [10.0, 11.0, 10.0, 9.0])
    assert first["promoted"] and first["reference"] == "base" and first["champion"] == 1
    assert first["version"] == 1 and first["reference_version"] is None
    second = gate("promote-2", "file:///ckpt/b", [1.0, 2.0, 1.5, 1.0])
    assert not second["promoted"] and second["reference"] == "champion"
    assert (second["version"], second["reference_version"], second["champion"]) == (2, 1, 1)
    assert evaluated == [("file:///base", "base"), ("file:///ckpt/a", "champion")]

    registry = ModelRegistry(cfg.mlflow_uri)
    assert registry.champion("toy") == 1 and registry.candidate("toy") == 2
    tags = registry.client.get_model_version(registry.model_name("toy"), "2").tags
    assert tags["promotion.decision"] == "rejected" and tags["promotion.reason"] == second["reason"]
    assert tags["metric.eval.mean"] == repr(1.375) and tags["odyssey.pipeline_run"] == "envelope"
    runs = {r.data.tags["odyssey.stage"]: r for r in _stage_runs(cfg)}
    assert runs["promote-2"].data.tags["promotion.promoted"] == "False"
    assert runs["promote-2"].data.tags["promotion.reason"] == second["reason"]
    assert runs["promote-2"].data.params == {"reference": "champion", "reference_version": "1"}
    assert runs["promote-1"].data.params["reference_version"] == "base"
    json.dumps([first, second])  # plain outputs, fit for a marker


# -- the generic evaluate / register / nightly stages ---------------------------------------------


class ToyRunConfig(RunConfig):
    """A pipeline config with the shared promotion section, as every recipe's has."""

    game: str = "toy"
    promotion: PromotionStage = PromotionStage()


class ToyEvaluations:
    """A recipe's evaluation of one model: scores read from the model folder (a real store
    folder or local path), a report with a picture beside it; counts whom it played."""

    def __init__(self) -> None:
        self.played: list[tuple[str, str]] = []

    def __call__(self, cfg: RunConfig, ref: str, label: str, out_dir: Path) -> Evaluation:
        self.played.append((ref, label))
        out_dir.mkdir(parents=True, exist_ok=True)
        model = fetch(cfg, ref, out_dir / "model") if "://" in ref else Path(ref)
        scores = json.loads((model / "scores.json").read_text())
        report = out_dir / "report" / "report.md"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(f"# {label}\n")
        (report.parent / "plot.png").write_bytes(b"png")
        mean = sum(scores) / len(scores)
        return Evaluation(
            scores=scores,
            summary={"mean": mean, "undefined": float("nan")},
            report=report,
            details={"inference": {"source": "toy"}},
        )


def _recipe(evaluate: ToyEvaluations) -> Recipe:
    def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not part of the stages")

    return Recipe(
        name="toy",
        summary="a recipe of fixed scores",
        settings_type=dict,
        load_settings=unused,
        build_trainer=unused,
        response_format="odysseus",
        system_prompt=unused,
        owns_model=unused,
        serving_env=unused,
        example_input=ExampleInput(text="", frame_shape=(1, 1, 3)),
        load_pipeline=unused,
        evaluate_model=evaluate,
        nightly_evaluate=unused,
    )


def _model(cfg: RunConfig, name: str, scores: list[float]) -> str:
    """A 'model' folder in the run's store whose evaluation gives ``scores``."""
    folder = cfg.run_dir / "models-src" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scores.json").write_text(json.dumps(scores))
    return run_store(cfg, "models").put_dir(folder, name)


def _toy_cfg(tmp_path: Path, run: str = "run", **more: Any) -> ToyRunConfig:
    return ToyRunConfig(name="toy", run_dir=tmp_path / run, experiment="odyssey/test", **more)


def test_evaluate_stage_plays_the_rows_publishes_and_reruns_on_a_republished_row(
    tmp_path: Path,
) -> None:
    cfg = _toy_cfg(tmp_path)
    evaluate = ToyEvaluations()
    recipe = _recipe(evaluate)
    base, candidate = _model(cfg, "base", [0.0, 1.0]), _model(cfg, "cand", [2.0, 4.0])
    rows = {"base": base, "sft": None, "candidate": candidate}

    out = evaluate_stage(cfg, recipe, rows, extra=lambda e: {"gap": 2.5, "note": "toy"})
    assert evaluate.played == [(base, "base"), (candidate, "candidate")]  # no sft row
    assert (out["episodes"], out["mean"], out["base_mean"]) == (2, 3.0, 0.5)
    assert out["undefined"] is None and (out["gap"], out["note"]) == (2.5, "toy")
    recorded = json.loads(Path(out["scores_path"]).read_text())
    assert recorded["scores"] == [2.0, 4.0]
    assert recorded["rows"] == {
        "base": {"uri": base, "scores": [0.0, 1.0]},
        "candidate": {"uri": candidate, "scores": [2.0, 4.0]},
    }
    store = run_store(cfg)
    published = {f.path for f in store.read_manifest(store.key_for(out["report_uri"])).files}
    assert published == {"report.md", "plot.png"}  # the report's folder, not the model
    fetched = store.get_file(store.key_for(out["scores_uri"]), tmp_path / "s.json")
    assert json.loads(Path(fetched).read_text()) == recorded
    (run,) = _stage_runs(cfg)
    assert run.data.metrics == {"eval.mean": 3.0, "base_mean": 0.5, "gap": 2.5}
    json.dumps(out, allow_nan=False)  # strict JSON: NaN became None

    assert evaluate_stage(cfg, recipe, rows) == out  # same inputs: the marker answers
    assert len(evaluate.played) == 2
    _model(cfg, "base", [1.0, 1.0])  # the base model republished under the same URI
    again = evaluate_stage(cfg, recipe, rows)
    assert again["base_mean"] == 1.0 and len(evaluate.played) == 4

    with pytest.raises(ValueError, match="needs a candidate row"):
        evaluate_stage(cfg, recipe, {"base": base})


def test_register_stage_reuses_the_base_row_then_plays_the_champion(tmp_path: Path) -> None:
    from odyssey_core.registry.models import ModelRegistry

    cfg = _toy_cfg(tmp_path)
    evaluate = ToyEvaluations()
    recipe = _recipe(evaluate)
    base = _model(cfg, "base", [0.0, 1.0, 0.5, 0.2])
    strong = _model(cfg, "strong", [10.0, 11.0, 10.0, 9.0])
    evaluation = evaluate_stage(cfg, recipe, {"base": base, "candidate": strong})
    first = register_stage(
        cfg, recipe, strong, evaluation, base, score_keys=("mean", "episodes"), metric="mean"
    )
    assert first["promoted"] and first["reference"] == "base" and first["metric"] == "mean"
    assert first["reference_mean"] == pytest.approx(0.425)
    assert evaluate.played == [(base, "base"), (strong, "candidate")]  # base not played again

    # the next candidate, from another run folder, against the champion played now; the
    # pipeline's promotion margin is the gate's
    shared = {"tracking_uri": cfg.mlflow_uri, "artifact_uri": cfg.store_uri}
    cfg2 = _toy_cfg(
        tmp_path, "run2", run_id="second", promotion=PromotionStage(margin=0.5), **shared
    )
    close = _model(cfg2, "close", [10.5, 11.5, 10.5, 9.5])
    evaluation = evaluate_stage(cfg2, recipe, {"candidate": close})
    second = register_stage(
        cfg2, recipe, close, evaluation, base, score_keys=("mean",), reference_keys=("undefined",)
    )
    assert (second["reference"], second["reference_version"], second["version"]) == (
        "champion",
        1,
        2,
    )
    assert not second["promoted"]  # 0.5 ahead is not ahead by more than the 0.5 margin
    assert second["reference_mean"] == pytest.approx(10.0)
    assert second["reference_undefined"] is None  # the champion's NaN summary number
    assert evaluate.played[-1] == (
        ModelRegistry(cfg.mlflow_uri).checkpoint_uri("toy", 1),
        "champion",
    )
    tags = ModelRegistry(cfg.mlflow_uri).client.get_model_version("odysseus-toy", "2").tags
    assert tags["metric.eval.mean"] == repr(10.5) and tags["odyssey.recipe"] == "toy"
    assert tags["odyssey.pipeline_run"] == "second"

    with pytest.raises(TypeError, match="no promotion: section"):
        register_stage(_cfg(tmp_path), recipe, close, evaluation, base)


def test_nightly_stage_compares_the_champion_with_its_recorded_score(tmp_path: Path) -> None:
    from odyssey_core.registry.models import ModelRegistry

    cfg = _toy_cfg(tmp_path, promotion=PromotionStage(nightly_margin=1.0))
    evaluate = ToyEvaluations()
    recipe = _recipe(evaluate)
    champion = _model(cfg, "champion", [5.0, 5.0])
    registry = ModelRegistry(cfg.mlflow_uri)
    registry.register_checkpoint(champion, "toy", metrics={"eval.mean": 5.0})
    registry.promote("toy", [5.0, 5.0, 5.0], base_scores=[0.0, 0.0, 0.5])

    ok = nightly_stage(cfg, recipe, score="mean", out_dir=tmp_path / "n1", log_fn=lambda _: None)
    assert not ok["regressed"] and ok["current"] == ok["recorded"] == 5.0
    assert ok["metric"] == "mean" and ok["margin"] == 1.0
    assert ok["evaluated"]["champion"]["inference"] == {"source": "toy"}
    _model(cfg, "champion", [3.0, 4.0])  # tonight the champion plays worse than recorded
    bad = nightly_stage(cfg, recipe, score="mean", out_dir=tmp_path / "n2", log_fn=print)
    assert bad["regressed"] and bad["current"] == 3.5
    assert not nightly_stage(cfg, recipe, score="mean", out_dir=tmp_path / "n3", margin=2.0)[
        "regressed"
    ]
    history = registry.client.get_metric_history(bad["mlflow_run_id"], "champion_mean")
    assert sorted((m.step, m.value) for m in history) == [(0, 5.0), (1, 3.5), (2, 3.5)]
    reports = registry.client.list_artifacts(bad["mlflow_run_id"], "reports/n2/champion")
    assert {a.path for a in reports} == {
        "reports/n2/champion/report.md",
        "reports/n2/champion/plot.png",
    }


def test_local_copy_fetches_a_store_uri_into_a_folder_named_after_it(tmp_path: Path) -> None:
    cfg = _toy_cfg(tmp_path)
    first, second = _model(cfg, "a", [1.0]), _model(cfg, "b", [2.0])
    assert local_copy(cfg, str(tmp_path / "here"), tmp_path / "work") == tmp_path / "here"
    copies = [local_copy(cfg, uri, tmp_path / "work") for uri in (first, second)]
    assert copies[0] != copies[1] and all(c.name.startswith("model-") for c in copies)
    assert [json.loads((c / "scores.json").read_text()) for c in copies] == [[1.0], [2.0]]
    assert local_copy(cfg, first, tmp_path / "work", "dataset").name.startswith("dataset-")

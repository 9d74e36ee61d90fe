"""The Odysseus training pipeline as plain functions: curate -> SFT -> RL -> evaluate -> promote.

Curation is itself five stages (record walkthroughs -> sample frames -> annotate -> validate ->
build the dataset); ``stage_curate`` runs them in order. Every stage works in
``<run_dir>/<stage>/`` (``<run_dir>/curate/<stage>/`` for the curation ones), publishes what it
made to the artifact store under ``runs/<run_id>/<stage>/`` and returns small dicts of URIs
and numbers (never models or datasets), so an orchestrator (the Prefect flows under
``flows/``) can pass them around cheaply; a stage reads its inputs back from the store by URI.
The last thing a stage writes is ``<stage dir>/done.json``: its outputs plus a fingerprint of
its inputs. Called again with the same inputs while that marker and the outputs exist, a stage
returns the recorded outputs without redoing any work; that is how a failed run resumes (RL
additionally continues from its latest checkpoint).

This module imports no Prefect: it runs the same from a notebook, a CLI or a test.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from odyssey_core.config import config_dir, deep_merge, load_preset

__all__ = [
    "CURATE_STAGES",
    "DONE_MARKER",
    "STAGES",
    "PipelineConfig",
    "RunConfig",
    "evaluate_checkpoint",
    "load_pipeline_config",
    "make_tracker",
    "nightly_evaluate",
    "read_marker",
    "stage_annotate",
    "stage_build_dataset",
    "stage_curate",
    "stage_evaluate",
    "stage_promote",
    "stage_record",
    "stage_rl",
    "stage_sample",
    "stage_sft",
    "stage_validate",
]

log = logging.getLogger(__name__)

DONE_MARKER = "done.json"
SCORE_KEY = "eval.mean_progress"  # the registered-version metric nightly-eval compares against


# -- configuration ------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StagePreset(_Model):
    """A library preset (name or YAML path) plus overrides merged over it."""

    preset: str = "tiny"
    overrides: dict[str, Any] = Field(default_factory=dict)


class SFTStage(StagePreset):
    base_model: str | None = Field(
        default=None, description="a local model folder; null: build the tiny Qwen3-VL (seed 0)"
    )


class EvalStage(_Model):
    suite: str = "odland"
    overrides: dict[str, Any] = Field(default_factory=dict, description="top-level suite keys")
    runs: int | None = Field(default=None, ge=1, description="from-start runs per level")
    max_new_tokens: int | None = Field(default=None, ge=1, description="None: backend default")
    vector: str = "sync"


class PromotionStage(_Model):
    margin: float | None = Field(default=None, ge=0, description="None: registry settings")
    alpha: float | None = Field(default=None, gt=0, lt=1)
    nightly_margin: float = Field(
        default=0.0, ge=0, description="nightly-eval fails when the champion drops more"
    )


class RunConfig(_Model):
    """Where one pipeline run lives: its folder, artifact store, MLflow tracking and experiment.
    Every pipeline config (this module's, GTR's) extends it; the stage helpers read only these."""

    name: str = "tiny"
    game: str = "odland"
    run_dir: Path = Path("out/pipeline/tiny")
    run_id: str | None = Field(default=None, description="artifact-store prefix; default: name")
    artifact_uri: str | None = Field(default=None, description="default: file://<run>/artifacts")
    tracking_uri: str | None = Field(default=None, description="default: sqlite:///<run>/mlflow.db")
    experiment: str = "odyssey/train_odysseus"

    @property
    def run_key(self) -> str:
        return self.run_id or self.name

    @property
    def store_uri(self) -> str:
        return self.artifact_uri or (self.run_dir.resolve() / "artifacts").as_uri()

    @property
    def mlflow_uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{self.run_dir.resolve() / 'mlflow.db'}"

    def stage_dir(self, stage: str) -> Path:
        path = self.run_dir / stage
        path.mkdir(parents=True, exist_ok=True)
        return path


class PipelineConfig(RunConfig):
    """One Odysseus pipeline run (``configs/pipeline/*.yaml``)."""

    curate: StagePreset = StagePreset()
    sft: SFTStage = SFTStage()
    rl: StagePreset = StagePreset()
    eval: EvalStage = EvalStage()
    promotion: PromotionStage = PromotionStage()


def load_pipeline_config(
    preset: str | Path = "tiny", overrides: Mapping[str, Any] | None = None
) -> PipelineConfig:
    """A preset name under ``configs/pipeline/`` or a YAML path, plus nested overrides."""
    return load_preset(
        PipelineConfig, preset, dict(overrides or {}), kind="pipeline", what="pipeline"
    )


# -- done markers -------------------------------------------------------------------------------


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-able inputs (configs as dicts, upstream URIs)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def read_marker(stage_dir: Path) -> dict[str, Any] | None:
    path = stage_dir / DONE_MARKER
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:  # a torn write: treat as not done
        return None


def _finished(stage_dir: Path, key: str) -> dict[str, Any] | None:
    """The recorded outputs when the marker matches ``key`` and its local outputs still exist."""
    marker = read_marker(stage_dir)
    if marker is None or marker.get("fingerprint") != key:
        return None
    if not all(Path(p).exists() for p in marker.get("local", [])):
        return None
    log.info("%s: done marker matches, skipping", stage_dir.name)
    return dict(marker["outputs"])


def _mark_done(
    stage_dir: Path, key: str, outputs: dict[str, Any], local: list[Path]
) -> dict[str, Any]:
    # Written atomically and last: a crash before this line means the stage reruns.
    marker = {"fingerprint": key, "outputs": outputs, "local": [str(p) for p in local]}
    tmp = stage_dir / f".{DONE_MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True))
    os.replace(tmp, stage_dir / DONE_MARKER)
    return outputs


# -- shared helpers -----------------------------------------------------------------------------


def make_tracker(cfg: RunConfig) -> Any:
    """The run's MLflow experiment; its artifacts go under the run folder, not ./mlruns."""
    from odyssey_core.registry.tracking import Tracker

    location = (cfg.run_dir.resolve() / "mlflow-artifacts").as_uri()
    return Tracker(cfg.mlflow_uri, cfg.experiment, artifact_location=location)


def _store(cfg: RunConfig, stage: str | None = None) -> Any:
    from odyssey_core.registry.artifacts import open_store

    store = open_store(cfg.store_uri)
    return store if stage is None else store.for_run(cfg.run_key, stage)


def _fetch(cfg: RunConfig, uri: str, dest: Path) -> Path:
    """A local copy of a store folder; reused when a previous attempt already fetched the same
    publication of it, fetched again when the folder was republished since."""
    return _fetch_input(cfg, uri, _publication(cfg, uri), dest)


def _training_dir(work: Path, key: str) -> Path:
    """``work/train`` for the inputs fingerprinted by ``key``. A retry with the same inputs
    resumes from the checkpoints there; other inputs (a new dataset or SFT model, another
    preset) start from scratch instead of resuming a run that trained on something else."""
    train = work / "train"
    stamp = work / ".train-inputs"
    if stamp.is_file() and stamp.read_text() != key:
        log.info("%s: inputs changed, not resuming the previous training run", work.name)
        shutil.rmtree(train, ignore_errors=True)
    train.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return train


def _step_bar(desc: str, total: int | None = None) -> Any:
    """A per-step progress bar for the long stages; shown on a terminal only (disable=None),
    so logs and CI stay clean."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=None)


def _advance(bar: Any, step: int, **postfix: float) -> None:
    bar.update(max(0, step - bar.n))
    if postfix:
        bar.set_postfix({k: f"{v:.3g}" for k, v in postfix.items()}, refresh=False)


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if numeric and math.isfinite(float(value)):
            out[key] = float(value)
    return out


def _rl_preset_path(preset: str) -> Path:
    path = Path(preset)
    if path.suffix in {".yaml", ".yml"}:
        return path
    return config_dir() / "odysseus" / f"{preset}.yaml"


# -- curation stages ----------------------------------------------------------------------------
#
# Curation is five stages, each a separate unit of work (and Prefect task): it has its own
# folder ``<run_dir>/curate/<stage>/`` with its done marker, its own nested MLflow run, and it
# publishes its output folder to ``runs/<run_id>/curate/<folder>/`` in the store. A stage reads
# its inputs back from the store by URI, so consecutive stages may run on different workers.
# The folder names in the store are those of ``odyssey curate`` (``odyssey_core.data.cli``).

CURATE_STAGES = ("record", "sample", "annotate", "validate", "build-dataset")
STAGES = (*CURATE_STAGES, "sft", "rl", "evaluate", "promote")
_PROGRESS = {"show_progress": True, "sampling": {"show_progress": True}}


def _curate_config(cfg: PipelineConfig) -> Any:
    from odyssey_core.data.cli import load_curate_config

    return load_curate_config(cfg.curate.preset, cfg.curate.overrides)


def _section(config: Any, *names: str) -> dict[str, Any]:
    """The parts of the curation config one stage depends on (progress bars excluded: they do
    not change what a stage makes, so toggling them must not rerun anything)."""
    dump = config.model_dump(mode="json", exclude=_PROGRESS)
    return {name: dump[name] for name in names} if names else dump


def _publication(cfg: RunConfig, uri: str) -> str:
    """Which publication of a store folder ``uri`` holds: its manifest (written last, with the
    upload time). A stage's URI is the same on every rerun, so fingerprints take this as well:
    when an upstream stage reruns, everything downstream of it reruns too."""
    store = _store(cfg)
    manifest = store.read_manifest(store.key_for(uri))
    return fingerprint(manifest.created_at, [(f.path, f.sha256) for f in manifest.files])


def _fetch_input(cfg: RunConfig, uri: str, publication: str, dest: Path) -> Path:
    """A local copy of the current publication of ``uri``; a copy of an older one (a previous
    run of the upstream stage) is replaced rather than reused."""
    stamp = dest.with_name(f".{dest.name}.publication")
    if dest.is_dir() and stamp.is_file() and stamp.read_text() == publication:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    store = _store(cfg)
    store.get_dir(store.key_for(uri), dest, overwrite=True)
    stamp.write_text(publication)
    return dest


def _inputs(cfg: RunConfig, **uris: str) -> dict[str, tuple[str, str]]:
    """name -> (uri, publication) for a stage's store inputs."""
    return {name: (uri, _publication(cfg, uri)) for name, uri in uris.items()}


def _fetch_inputs(cfg: PipelineConfig, inputs: Mapping[str, tuple[str, str]], out: Path) -> None:
    for folder, (uri, publication) in inputs.items():
        _fetch_input(cfg, uri, publication, out / folder)


def _rebase_walkthroughs(folder: Path) -> None:
    """Walkthrough records hold absolute paths of the machine that recorded them; point those
    at the fetched copies in ``folder`` (an imported video left in place keeps its path)."""
    from odyssey_core.data.dataset import read_json, write_json

    for path in sorted(folder.glob("*.json")):
        record = read_json(path)
        if not isinstance(record, dict) or "video" not in record:
            continue
        for field in ("video", "sidecar"):
            value = record.get(field)
            if value and (folder / Path(value).name).is_file():
                record[field] = str((folder / Path(value).name).resolve())
        write_json(path, record)


def _fresh(path: Path) -> Path:
    # a stage's output folder is rebuilt from scratch: files of an earlier config (a level no
    # longer recorded, a frame no longer sampled) must not leak into the new publication
    shutil.rmtree(path, ignore_errors=True)
    return path


def _level_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[str(row["level"])] = counts.get(str(row["level"]), 0) + 1
    return dict(sorted(counts.items()))


def stage_record(cfg: PipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """Record (or import) the walkthrough videos; returns ``walkthroughs_uri``."""
    from odyssey_core.data.cli import run_record
    from odyssey_core.data.walkthroughs import load_walkthroughs

    config = _curate_config(cfg)
    work = cfg.stage_dir("curate/record")
    params = _section(config, "game", "source", "record", "imports")
    key = fingerprint("record", cfg.run_key, params)
    if (done := _finished(work, key)) is not None:
        return done
    with make_tracker(cfg).stage_run("record", parent_run_id=parent_run_id, params=params) as run:
        _fresh(work / "out" / "walkthroughs")
        folder = run_record(config, work / "out")
        walkthroughs = load_walkthroughs(folder)
        frames: dict[str, int] = {}
        for w in walkthroughs:
            # one level per recorded video; an imported one is split over its segments by time
            total = sum(s["end_s"] - s["start_s"] for s in w.segments) or 1.0
            for s in w.segments:
                share = (s["end_s"] - s["start_s"]) / total
                frames[s["level"]] = frames.get(s["level"], 0) + round(w.frame_count * share)
        run.log_metrics(
            {
                "walkthroughs": float(len(walkthroughs)),
                "frames": float(sum(frames.values())),
                **{f"frames.{level}": float(n) for level, n in frames.items()},
            }
        )
        uri = _store(cfg, "curate").put_dir(folder, "walkthroughs")
        run.log_artifact_ref("walkthroughs", uri)
        outputs = {
            "walkthroughs_uri": uri,
            "walkthroughs": len(walkthroughs),
            "frames": sum(frames.values()),
        }
    return _mark_done(work, key, outputs, [folder])


def stage_sample(
    cfg: PipelineConfig, walkthroughs_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Sample and pHash-dedupe frames of the walkthroughs; returns ``samples_uri``."""
    from odyssey_core.data.cli import run_sample
    from odyssey_core.data.dataset import read_table
    from odyssey_core.data.sampling import SAMPLES_FILE
    from odyssey_core.data.walkthroughs import load_walkthroughs

    config = _curate_config(cfg)
    work = cfg.stage_dir("curate/sample")
    params = _section(config, "game", "sampling")
    inputs = _inputs(cfg, walkthroughs=walkthroughs_uri)
    key = fingerprint("sample", cfg.run_key, params, inputs)
    if (done := _finished(work, key)) is not None:
        return done
    with make_tracker(cfg).stage_run("sample", parent_run_id=parent_run_id, params=params) as run:
        _fetch_inputs(cfg, inputs, work / "out")
        _rebase_walkthroughs(work / "out" / "walkthroughs")
        _fresh(work / "out" / "samples")
        folder = run_sample(config, work / "out")
        per_level = _level_counts(read_table(folder / SAMPLES_FILE))
        kept = sum(per_level.values())
        recorded = sum(w.frame_count for w in load_walkthroughs(work / "out" / "walkthroughs"))
        run.log_metrics(
            {
                "frames_in": float(recorded),  # what was recorded, before sampling and dedup
                "frames_kept": float(kept),
                **{f"frames_kept.{k}": float(n) for k, n in per_level.items()},
            }
        )
        uri = _store(cfg, "curate").put_dir(folder, "samples")
        run.log_artifact_ref("samples", uri)
        outputs = {"samples_uri": uri, "samples": kept}
    return _mark_done(work, key, outputs, [folder])


def stage_annotate(
    cfg: PipelineConfig, samples_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Annotate the sampled frames with the teacher; returns ``annotations_uri``. The teacher's
    response cache stays in this stage's folder, so a retry pays only for frames not yet done."""
    import pyarrow.parquet as pq

    from odyssey_core.data.cli import run_annotate
    from odyssey_core.data.dataset import read_json
    from odyssey_core.data.teachers import ANNOTATIONS_FILE

    config = _curate_config(cfg)
    work = cfg.stage_dir("curate/annotate")
    params = _section(config, "game", "teacher")
    inputs = _inputs(cfg, samples=samples_uri)
    key = fingerprint("annotate", cfg.run_key, params, inputs)
    if (done := _finished(work, key)) is not None:
        return done
    with make_tracker(cfg).stage_run("annotate", parent_run_id=parent_run_id, params=params) as run:
        _fetch_inputs(cfg, inputs, work / "out")
        folder = run_annotate(config, work / "out")
        rows = pq.read_metadata(folder / ANNOTATIONS_FILE).num_rows
        metrics = read_json(folder / "teacher_metrics.json")
        # tokens, cost, cache hits, HTTP counters: whatever the teacher reports as numbers
        run.log_metrics(_numeric({**metrics, "annotations": rows}))
        uri = _store(cfg, "curate").put_dir(folder, "annotations")
        run.log_artifact_ref("annotations", uri)
        outputs = {"annotations_uri": uri, "annotations": rows}
    return _mark_done(work, key, outputs, [folder])


def stage_validate(
    cfg: PipelineConfig,
    annotations_uri: str,
    samples_uri: str,
    *,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Validate the annotations against the frames, quarantining failing rows; returns
    ``validation_uri``. Raises ``ValidationFailed`` (not transient: no retry helps) when more
    than ``max_failed_share`` of the rows fail; the report is logged to MLflow either way."""
    from odyssey_core.data.cli import run_validate
    from odyssey_core.data.dataset import VALIDATION_HTML, VALIDATION_JSON, read_json
    from odyssey_core.data.validation import ValidationFailed

    config = _curate_config(cfg)
    work = cfg.stage_dir("curate/validate")
    params = _section(config, "game", "validation")
    inputs = _inputs(cfg, annotations=annotations_uri, samples=samples_uri)
    key = fingerprint("validate", cfg.run_key, params, inputs)
    if (done := _finished(work, key)) is not None:
        return done
    with make_tracker(cfg).stage_run("validate", parent_run_id=parent_run_id, params=params) as run:
        _fetch_inputs(cfg, inputs, work / "out")
        target = _fresh(work / "out" / "validation")

        def log_report() -> dict[str, Any]:
            report = read_json(target / VALIDATION_JSON)
            summary = report.get("summary", {})
            # a top-level flag makes log_validation_report tag the run validation.curate
            run.log_validation_report({**report, "ok": bool(summary.get("success"))}, "curate")
            if (target / VALIDATION_HTML).is_file():
                run.log_artifact(target / VALIDATION_HTML, "reports")
            run.log_metrics(
                _numeric(
                    {k: summary.get(k) for k in ("rows", "passed", "quarantined", "failed_share")}
                )
            )
            return summary

        try:
            folder = run_validate(config, work / "out")
        except ValidationFailed:
            if (target / VALIDATION_JSON).is_file():
                log_report()  # the reason is what one wants to see on a failed run
            raise
        summary = log_report()
        uri = _store(cfg, "curate").put_dir(folder, "validation")
        run.log_artifact_ref("validation", uri)
        outputs = {
            "validation_uri": uri,
            "passed": int(summary.get("passed", 0)),
            "quarantined": int(summary.get("quarantined", 0)),
        }
    return _mark_done(work, key, outputs, [folder])


def stage_build_dataset(
    cfg: PipelineConfig,
    validation_uri: str,
    samples_uri: str,
    annotations_uri: str,
    *,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Write the SFT dataset folder from the validated rows and their frames; returns
    ``dataset_uri`` and ``num_samples``. The teacher's metrics go into the manifest."""
    from odyssey_core.data.cli import run_build

    config = _curate_config(cfg)
    work = cfg.stage_dir("curate/build-dataset")
    # the manifest records the whole curation config, so all of it is an input here
    params = _section(config)
    inputs = _inputs(
        cfg, validation=validation_uri, samples=samples_uri, annotations=annotations_uri
    )
    key = fingerprint("build-dataset", cfg.run_key, params, inputs)
    if (done := _finished(work, key)) is not None:
        return done
    tracker = make_tracker(cfg)
    with tracker.stage_run("build-dataset", parent_run_id=parent_run_id, params=params) as run:
        _fetch_inputs(cfg, inputs, work / "out")
        _fresh(work / "out" / "dataset")
        dataset = run_build(config, work / "out")
        manifest = json.loads((dataset / "manifest.json").read_text())
        uri = _store(cfg, "curate").put_dir(dataset, "dataset")
        run.log_dataset_manifest({**manifest, "uri": uri}, "sft")
        num_samples = int(manifest.get("num_samples", 0))
        metrics = {
            "num_samples": float(num_samples),
            "num_quarantined": float(manifest.get("num_quarantined", 0)),
        }
        for split, n in manifest.get("splits", {}).items():
            metrics[f"samples.{split}"] = float(n)
        for level, splits in manifest.get("levels", {}).items():
            metrics[f"samples.{level}"] = float(sum(splits.values()))
        run.log_metrics(metrics)
        outputs = {"dataset_uri": uri, "num_samples": num_samples}
    return _mark_done(work, key, outputs, [dataset])


def stage_curate(cfg: PipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """The five curation stages in order (each skipped when done); returns every stage's URI,
    ``dataset_uri`` among them, and ``num_samples``."""
    record = stage_record(cfg, parent_run_id=parent_run_id)
    sample = stage_sample(cfg, record["walkthroughs_uri"], parent_run_id=parent_run_id)
    annotate = stage_annotate(cfg, sample["samples_uri"], parent_run_id=parent_run_id)
    validate = stage_validate(
        cfg, annotate["annotations_uri"], sample["samples_uri"], parent_run_id=parent_run_id
    )
    build = stage_build_dataset(
        cfg,
        validate["validation_uri"],
        sample["samples_uri"],
        annotate["annotations_uri"],
        parent_run_id=parent_run_id,
    )
    return {
        "walkthroughs_uri": record["walkthroughs_uri"],
        "samples_uri": sample["samples_uri"],
        "annotations_uri": annotate["annotations_uri"],
        "validation_uri": validate["validation_uri"],
        **build,
    }


# -- stages -------------------------------------------------------------------------------------


def stage_sft(
    cfg: PipelineConfig, dataset_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Fine-tune the base model on the dataset; returns ``model_uri`` and ``base_model_uri``."""
    from odyssey_core.sft.settings import load_sft_settings
    from odyssey_core.sft.trainer import run_sft

    work = cfg.stage_dir("sft")
    settings = load_sft_settings(cfg.sft.preset, cfg.sft.overrides)
    # the dataset's publication too: a rebuilt dataset (same URI) retrains
    key = fingerprint(
        "sft",
        cfg.run_key,
        settings.model_dump(mode="json"),
        cfg.sft.base_model,
        _inputs(cfg, dataset=dataset_uri),
    )
    if (done := _finished(work, key)) is not None:
        return done
    store = _store(cfg, "sft")
    with make_tracker(cfg).stage_run("sft", parent_run_id=parent_run_id, params=settings) as run:
        dataset = _fetch(cfg, dataset_uri, work / "dataset")
        if cfg.sft.base_model is not None:
            base = Path(cfg.sft.base_model)
        else:
            base = work / "base-model"
            if not (base / "config.json").is_file():
                from odyssey_core.models.tiny import build_tiny_model

                build_tiny_model(base, seed=0)

        bar = _step_bar("sft")

        def on_metrics(metrics: dict[str, Any]) -> None:
            step = metrics.get("step")
            run.log_metrics(_numeric(metrics), step=int(step) if step is not None else None)
            if step is not None and "loss" in metrics:
                _advance(bar, int(step), loss=float(metrics["loss"]))

        # resume=True: a retried or resumed run picks up the latest SFT checkpoint
        with bar:
            result = run_sft(
                settings,
                dataset,
                base,
                _training_dir(work, key),
                resume=True,
                callbacks=[on_metrics],
            )
        final = {"steps": float(result.steps)}
        for name in ("train_loss", "eval_loss"):
            if getattr(result, name) is not None:
                final[f"final_{name}"] = float(getattr(result, name))
        run.log_metrics(final)
        model_uri = store.put_dir(result.final_dir, "model")
        base_uri = store.put_dir(base, "base-model")
        run.log_artifact_ref("model", model_uri)
        outputs = {"model_uri": model_uri, "base_model_uri": base_uri, "steps": result.steps}
    return _mark_done(work, key, outputs, [result.final_dir])


def stage_rl(
    cfg: PipelineConfig, model_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """RL from the SFT model, resuming from the latest checkpoint; returns ``checkpoint_uri``."""
    from odyssey_core.rl.checkpoint import latest_checkpoint, policy_dir
    from odyssey_core.rl.train_settings import load_train_settings
    from odyssey_core.rl.trainer import RLTrainer

    work = cfg.stage_dir("rl")
    # the SFT model's publication too: a retrained SFT model (same URI) trains RL again
    key = fingerprint(
        "rl", cfg.run_key, cfg.rl.model_dump(mode="json"), _inputs(cfg, model=model_uri)
    )
    if (done := _finished(work, key)) is not None:
        return done
    sft_model = _fetch(cfg, model_uri, work / "sft-model")
    overrides = deep_merge(cfg.rl.overrides, {"model": {"path": str(sft_model.resolve())}})
    settings = load_train_settings(_rl_preset_path(cfg.rl.preset), overrides)
    with make_tracker(cfg).stage_run("rl", parent_run_id=parent_run_id, params=settings) as run:
        bar = _step_bar("rl", settings.steps)

        def on_step(step: int, metrics: dict[str, float]) -> None:
            run.log_metrics(_numeric(metrics), step=step)
            progress = metrics.get("all/progress_mean", float("nan"))
            _advance(bar, step, progress=progress)

        train_dir = _training_dir(work, key)
        trainer = RLTrainer.from_settings(settings, train_dir, resume=True, callbacks=[on_step])
        try:
            with bar:
                trainer.train()
            steps = trainer.step
        finally:
            trainer.close()
        checkpoint = latest_checkpoint(train_dir)
        if checkpoint is None:
            raise RuntimeError(f"RL finished without a checkpoint under {train_dir}")
        # The policy folder is what an hf: agent (and the registry) needs; the optimizer state
        # stays local for resuming. Its key names the inputs, so a registered version keeps
        # pointing at the weights it was gated on when a later run of this pipeline trains anew.
        uri = _store(cfg, "rl").put_dir(policy_dir(checkpoint), f"checkpoint-{key[:12]}")
        run.log_artifact_ref("checkpoint", uri)
        run.log_metrics({"steps": float(steps)})
        outputs = {"checkpoint_uri": uri, "steps": steps, "checkpoint": checkpoint.name}
    return _mark_done(work, key, outputs, [checkpoint])


def _episode_scores(results: Any, agent: str) -> list[float]:
    """Per-episode progress made (from every section that ran), the gate's sample."""
    return [
        float(r.gained)
        for section in results.sections
        if section.skipped is None
        for r in section.records.get(agent, [])
        if r.error is None
    ]


def evaluate_checkpoint(
    cfg: PipelineConfig, model_uri: str, label: str, out_dir: Path
) -> dict[str, Any]:
    """Evaluate one model folder of the store on the configured suite, no marker: returns
    per-episode scores, their mean, the flat metrics and the report folder."""
    from odyssey_core.eval.agents import build_policy_agent, parse_agent_spec
    from odyssey_core.eval.report import write_report
    from odyssey_core.eval.runner import evaluate_suite
    from odyssey_core.eval.suites import load_suite
    from odyssey_core.policy.base import GenerationParams

    out_dir.mkdir(parents=True, exist_ok=True)
    model = _fetch(cfg, model_uri, out_dir / "model")
    suite = load_suite(cfg.eval.suite, cfg.eval.overrides)
    params = (
        GenerationParams(max_new_tokens=cfg.eval.max_new_tokens)
        if cfg.eval.max_new_tokens
        else None
    )
    agent = build_policy_agent(
        parse_agent_spec(f"hf:{model.resolve()}", label=label), game=cfg.game, params=params
    )
    results = evaluate_suite(suite, [agent], runs=cfg.eval.runs, vector=cfg.eval.vector)
    report = write_report(results, out_dir / "report", videos=False, plots=False)
    scores = _episode_scores(results, label)
    mean = statistics.fmean(scores) if scores else float("nan")
    (out_dir / "scores.json").write_text(json.dumps({"label": label, "scores": scores}))
    return {
        "scores": scores,
        "mean": mean,
        "metrics": _numeric(results.metrics()),
        "report_dir": str(out_dir / "report"),
        "report_markdown": str(report.markdown),
    }


def stage_evaluate(
    cfg: PipelineConfig, checkpoint_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Evaluate the RL checkpoint; returns ``report_uri``, ``scores_uri`` and the mean."""
    work = cfg.stage_dir("evaluate")
    key = fingerprint(
        "evaluate",
        cfg.run_key,
        cfg.eval.model_dump(mode="json"),
        _inputs(cfg, checkpoint=checkpoint_uri),
    )
    if (done := _finished(work, key)) is not None:
        return done
    params = cfg.eval.model_dump(mode="json")
    with make_tracker(cfg).stage_run("evaluate", parent_run_id=parent_run_id, params=params) as run:
        evaluated = evaluate_checkpoint(cfg, checkpoint_uri, "candidate", work / "candidate")
        run.log_metrics(_numeric({**evaluated["metrics"], SCORE_KEY: evaluated["mean"]}))
        run.log_artifact(evaluated["report_markdown"], "reports")
        store = _store(cfg, "evaluate")
        report_uri = store.put_dir(evaluated["report_dir"], "report")
        scores_uri = store.put_file(work / "candidate" / "scores.json", "scores.json")
        outputs = {
            "report_uri": report_uri,
            "scores_uri": scores_uri,
            "scores_path": str(work / "candidate" / "scores.json"),
            "report_markdown": str(evaluated["report_markdown"]),
            "mean_progress": evaluated["mean"],
            "episodes": len(evaluated["scores"]),
        }
    return _mark_done(work, key, outputs, [work / "candidate" / "scores.json"])


def _read_scores(cfg: PipelineConfig, evaluation: Mapping[str, Any], dest: Path) -> list[float]:
    path = Path(evaluation.get("scores_path", ""))
    if not path.is_file():
        store = _store(cfg)
        path = store.get_file(store.key_for(evaluation["scores_uri"]), dest)
    return [float(x) for x in json.loads(Path(path).read_text())["scores"]]


def stage_promote(
    cfg: PipelineConfig,
    checkpoint_uri: str,
    evaluation: Mapping[str, Any],
    base_model_uri: str,
    *,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Register the checkpoint as the candidate version and run the promotion gate against the
    champion's scores on the same suite (re-evaluated now) or, for the first model, the base
    model's. Returns the version, the decision and its reason."""
    from odyssey_core.registry.models import ModelRegistry

    work = cfg.stage_dir("promote")
    candidate_scores = _read_scores(cfg, evaluation, work / "candidate-scores.json")
    # The scores themselves, not their URI: a re-evaluation publishes under the same key. The
    # checkpoint's URI already names the inputs it was trained on (see stage_rl).
    key = fingerprint(
        "promote",
        cfg.run_key,
        cfg.eval.model_dump(mode="json"),
        cfg.promotion.model_dump(mode="json"),
        checkpoint_uri,
        base_model_uri,
        candidate_scores,
    )
    if (done := _finished(work, key)) is not None:
        return done
    registry = ModelRegistry(cfg.mlflow_uri)
    with make_tracker(cfg).stage_run("promote", parent_run_id=parent_run_id) as run:
        champion = registry.champion(cfg.game)
        reference_uri = registry.checkpoint_uri(cfg.game, champion) if champion else base_model_uri
        label = "champion" if champion else "base"
        shutil.rmtree(work / label, ignore_errors=True)  # the champion may have changed
        reference = evaluate_checkpoint(cfg, reference_uri, label, work / label)
        mean = statistics.fmean(candidate_scores) if candidate_scores else float("nan")
        version = registry.register_checkpoint(
            checkpoint_uri,
            cfg.game,
            run_id=run.run_id,
            metrics={SCORE_KEY: mean, "eval.episodes": float(len(candidate_scores))},
            tags={"odyssey.pipeline_run": cfg.run_key, "odyssey.suite": cfg.eval.suite},
        )
        decision = registry.promote(
            cfg.game,
            candidate_scores,
            champion_scores=reference["scores"] if champion else None,
            base_scores=None if champion else reference["scores"],
            margin=cfg.promotion.margin,
            alpha=cfg.promotion.alpha,
            candidate_version=version,
        )
        gate = decision.gate
        run.log_params({"reference": label, "reference_version": champion or "base"})
        run.log_metrics(
            _numeric(
                {"candidate_mean": mean, f"{label}_mean": reference["mean"], "version": version}
            )
        )
        run.set_tags(
            {"promotion.promoted": str(decision.promoted), "promotion.reason": gate.reason}
        )
        outputs = {
            "model_name": registry.model_name(cfg.game),
            "version": version,
            "promoted": decision.promoted,
            "reason": gate.reason,
            "reference": label,
            "reference_version": champion,
            "champion": decision.champion,
            "candidate_mean": mean,
            "reference_mean": reference["mean"],
        }
    return _mark_done(work, key, outputs, [])


# -- nightly evaluation -------------------------------------------------------------------------


def nightly_evaluate(
    cfg: PipelineConfig, out_dir: Path | None = None, *, log_fn: Callable[[str], None] = log.info
) -> dict[str, Any]:
    """Evaluate the champion (and the candidate, if any) on the suite and log each mean as one
    more point of a time series in MLflow (run ``nightly-<game>``). ``regressed`` says whether
    the champion fell below its recorded score by more than ``promotion.nightly_margin``; the
    caller decides what a regression does (the flow fails and emits an event)."""
    import time

    from odyssey_core.registry.models import ModelRegistry

    registry = ModelRegistry(cfg.mlflow_uri)
    name = registry.model_name(cfg.game)
    champion = registry.champion(cfg.game)
    if champion is None:
        raise RuntimeError(f"{name} has no champion to evaluate")
    out = out_dir or cfg.run_dir / "nightly" / time.strftime("%Y%m%dT%H%M%S")
    tracker = make_tracker(cfg)
    # one long-lived run per game: its metric history is the nightly time series
    found = tracker.client.search_runs(
        [tracker.experiment_id], filter_string=f"tags.`odyssey.nightly` = '{cfg.game}'"
    )
    series = (
        tracker.attach(found[0].info.run_id)
        if found
        else tracker.start(f"nightly-{cfg.game}", tags={"odyssey.nightly": cfg.game})
    )
    step = len(tracker.metric_history(series.run_id, "champion_mean"))
    rows: dict[str, Any] = {}
    targets = {"champion": champion}
    candidate = registry.candidate(cfg.game)
    if candidate is not None and candidate != champion:
        targets["candidate"] = candidate
    for label, version in targets.items():
        uri = registry.checkpoint_uri(cfg.game, version)
        evaluated = evaluate_checkpoint(cfg, uri, label, out / label)
        rows[label] = {"version": version, "mean": evaluated["mean"]}
        series.log_metrics(_numeric({f"{label}_mean": evaluated["mean"]}), step=step)
        log_fn(f"nightly {label} v{version}: mean progress {evaluated['mean']:.3f}")
    tags = registry.client.get_model_version(name, str(champion)).tags or {}
    recorded = float(tags.get(f"metric.{SCORE_KEY}", "nan"))
    current = rows["champion"]["mean"]
    regressed = math.isfinite(recorded) and recorded - current > cfg.promotion.nightly_margin
    series.log_metrics({"champion_regressed": float(regressed)}, step=step)
    return {
        "model_name": name,
        "champion": champion,
        "recorded": recorded,
        "current": current,
        "margin": cfg.promotion.nightly_margin,
        "regressed": regressed,
        "evaluated": rows,
        "mlflow_run_id": series.run_id,
    }

"""The Odysseus training pipeline as plain functions: curate -> SFT -> RL -> evaluate -> promote.

Curation is itself five stages (record walkthroughs -> sample frames -> annotate -> validate ->
build the dataset); ``stage_curate`` runs them in order. Every stage runs in the envelope of
:func:`odyssey_core.stages.run_stage`: it works in ``<run_dir>/<stage>/``
(``<run_dir>/curate/<stage>/`` for the curation ones), logs a nested MLflow stage run,
publishes what it made to the artifact store under ``runs/<run_id>/<stage>/`` and returns
small dicts of URIs and numbers; a stage reads its inputs back from the store by URI. Called
again with the same inputs while its done marker and outputs exist, a stage returns the
recorded outputs without redoing any work; that is how a failed run resumes (RL additionally
continues from its latest checkpoint). Evaluate, promote and the nightly run are the generic
stages of :mod:`odyssey_core.stages` (``evaluate_stage``, ``register_stage``, ``nightly_stage``)
over :func:`evaluate_model`, this recipe's evaluation of one model.

Before any work, the first stage checks what the run needs from this machine
(:func:`check_pipeline`: the teacher's environment variables, the Super Mario Land ROM, the
base model folder, imported videos) and fails with one error naming every missing setting.
Every evaluation (the evaluate stage, the promotion gate's reference, the nightly run) plays
with the inference settings of the pipeline's own RL preset (:func:`pipeline_inference`; the
paper's App. E.3), never with values typed again.

This module imports no Prefect (``tasks/odysseus.py`` and ``flows/odysseus.py`` wrap it).
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from odyssey_core.config import config_dir, deep_merge
from odyssey_core.recipe import RECIPES, Evaluation
from odyssey_core.stages import (
    DONE_MARKER,
    EVAL_ROWS,
    PipelineSection,
    PromotionStage,
    RowsEvaluator,
    RunConfig,
    Stage,
    StageContext,
    StagePreset,
    advance,
    evaluate_stage,
    fetch,
    finished_checkpoint,
    make_tracker,
    nightly_evaluator,
    nightly_table,
    numeric,
    read_marker,
    register_stage,
    run_stage,
    serving_fields,
    sft_here_or_launched,
    step_bar,
    train_here_or_launched,
)

__all__ = [
    "CURATE_STAGES",
    "DONE_MARKER",
    "EVAL_ROWS",
    "SCORE_KEY",
    "STAGES",
    "PipelineConfig",
    "PipelineSettingsError",
    "RunConfig",
    "check_pipeline",
    "evaluate_checkpoint",
    "evaluate_model",
    "evaluate_models",
    "load_pipeline_config",
    "make_tracker",
    "nightly_evaluate",
    "nightly_table",
    "pipeline_inference",
    "read_marker",
    "rl_effect",
    "stage_annotate",
    "stage_build_dataset",
    "stage_curate",
    "stage_evaluate",
    "stage_games",
    "stage_promote",
    "stage_record",
    "stage_rl",
    "stage_sample",
    "stage_sft",
    "stage_validate",
]

log = logging.getLogger(__name__)

SCORE_KEY = "eval.mean_progress"  # the registered-version metric nightly-eval compares against


# -- configuration ------------------------------------------------------------------------------


class SFTStage(StagePreset):
    base_model: str | None = Field(
        default=None, description="a local model folder; null: build the tiny Qwen3-VL (seed 0)"
    )


class EvalStage(PipelineSection):
    """Which suite the candidate is evaluated on. How the model answers (image scale, tokens,
    sampling, device, dtype) is not set here: it is the RL preset's (App. E.3)."""

    suite: str = "odland"
    overrides: dict[str, Any] = Field(default_factory=dict, description="top-level suite keys")
    runs: int | None = Field(default=None, ge=1, description="from-start runs per level")
    vector: str = "sync"


class PipelineConfig(RunConfig):
    """One Odysseus pipeline run (``configs/odysseus/pipeline/*.yaml``)."""

    preset_dir: ClassVar[str] = "odysseus/pipeline"
    preset_moved_from: ClassVar[str | None] = "pipeline"

    renamed_keys: ClassVar[Mapping[str, str]] = {"rl": "train"}

    curate: StagePreset = StagePreset()
    sft: SFTStage = SFTStage()
    train: StagePreset = Field(
        default=StagePreset(), description="the RL stage: a preset under configs/odysseus/"
    )
    eval: EvalStage = EvalStage()
    promotion: PromotionStage = PromotionStage()


#: a preset name under ``configs/odysseus/pipeline/`` or a YAML path, plus nested overrides
load_pipeline_config = PipelineConfig.load


def _rl_preset_path(preset: str) -> Path:
    path = Path(preset)
    if path.suffix in {".yaml", ".yml"}:
        return path
    return config_dir() / "odysseus" / f"{preset}.yaml"


def _rl_settings(cfg: PipelineConfig, overrides: Mapping[str, Any] | None = None) -> Any:
    from odyssey_core.recipes.odysseus.settings import load_train_settings

    merged = deep_merge(cfg.train.overrides, dict(overrides or {}))
    return load_train_settings(_rl_preset_path(cfg.train.preset), merged)


def pipeline_inference(cfg: PipelineConfig) -> Any:
    """How every evaluation of this pipeline lets a model answer: the RL preset's model and
    generation settings (:class:`~odyssey_core.eval.inference.InferenceSettings`)."""
    from odyssey_core.eval.inference import InferenceSettings

    source = f"RL preset {cfg.train.preset}" + (" with overrides" if cfg.train.overrides else "")
    return InferenceSettings.from_training(_rl_settings(cfg), source=source)


def stage_games(cfg: PipelineConfig) -> dict[str, str]:
    """The game each stage plays or reads, from the configs alone (nothing is run or checked
    on this machine): curation (recorded or imported), SFT (its data are curation's), RL's
    env and levels and prompt, the eval suite's main game. A stage that mixes games reports
    them all, joined by ``+``."""
    from odyssey_core.data.cli import import_entries, load_curate_config
    from odyssey_core.eval.suites import load_suite

    curate = load_curate_config(cfg.curate.preset, cfg.curate.overrides)
    curated = {curate.game}
    if curate.source == "import" and curate.imports_file is None:
        curated |= {e.game for e in import_entries(curate)}
    rl = _rl_settings(cfg)
    played = {rl.env.game, rl.model.game} | {level.split("-", 1)[0] for level in rl.levels}
    suite = load_suite(cfg.eval.suite, cfg.eval.overrides)
    main = {suite.game} | {suite.section_game(s) for s in suite.sections if s.split != "other_game"}
    return {
        "curate": "+".join(sorted(curated)),
        "sft": "+".join(sorted(curated)),
        "rl": "+".join(sorted(played)),
        "evaluate": "+".join(sorted(main)),
    }


class PipelineSettingsError(ValueError):
    """Settings this machine lacks for the run (not transient: no retry helps)."""


SML_ROM_VARIABLE = "ODYSSEY_SML_ROM"


def check_pipeline(cfg: PipelineConfig, environ: Mapping[str, str] | None = None) -> None:
    """Fail before any work when this machine lacks what the run needs, naming every missing
    setting at once: the teacher's environment variables, the videos of an import, the Super
    Mario Land ROM (``ODYSSEY_SML_ROM``) when a stage plays it, the base model folder; the RL
    preset and the eval suite must load (their own checks: start-state files, ...)."""
    import os

    from odyssey_core.data.cli import curate_problems, load_curate_config
    from odyssey_core.eval.suites import load_suite

    env = os.environ if environ is None else environ
    curate = load_curate_config(cfg.curate.preset, cfg.curate.overrides)
    problems = curate_problems(curate, dict(env))
    rl = _rl_settings(cfg)
    suite = load_suite(cfg.eval.suite, cfg.eval.overrides)
    mario = (
        (curate.source == "record" and curate.game == "mario")
        or any(level.startswith("mario-") for level in rl.levels)
        or suite.game == "mario"
    )
    if mario:
        rom = rl.env.rom_path or env.get(SML_ROM_VARIABLE)
        if not rom:
            problems.append(
                f"environment variable {SML_ROM_VARIABLE} is not set: your Super Mario Land ROM"
            )
        elif not Path(rom).is_file():
            problems.append(f"{SML_ROM_VARIABLE}: no ROM file at {rom}")
    if cfg.sft.base_model is not None and not (Path(cfg.sft.base_model) / "config.json").is_file():
        problems.append(f"sft.base_model: no model folder (config.json) at {cfg.sft.base_model}")
    if problems:
        raise PipelineSettingsError(
            f"pipeline {cfg.name!r} cannot start on this machine:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


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


def _run_curation(
    cfg: PipelineConfig,
    name: str,
    body: Callable[[StageContext], Mapping[str, Any]],
    params: dict[str, Any],
    *,
    inputs: Mapping[str, str] | None = None,
    parent_run_id: str | None,
) -> dict[str, Any]:
    """Curation stage ``name`` in the envelope, under ``curate/<name>``: its part of the
    curation config (``params``) is both what it is fingerprinted on and what it logs."""
    return run_stage(
        cfg,
        Stage(name, folder=f"curate/{name}", prefix="curate"),
        body,
        config=[params],
        inputs=inputs,
        params=params,
        parent_run_id=parent_run_id,
    )


def _curate_config(cfg: PipelineConfig) -> Any:
    """The curation config with the teacher's settings read from the environment (so a new
    teacher model or endpoint is a new fingerprint; the key is never in it)."""
    from odyssey_core.data.cli import load_curate_config
    from odyssey_core.data.teachers import resolve_teacher

    config = load_curate_config(cfg.curate.preset, cfg.curate.overrides)
    return config.model_copy(update={"teacher": resolve_teacher(config.teacher)})


def _section(config: Any, *names: str) -> dict[str, Any]:
    """The parts of the curation config one stage depends on (progress bars excluded: they do
    not change what a stage makes, so toggling them must not rerun anything)."""
    dump = config.model_dump(mode="json", exclude=_PROGRESS)
    return {name: dump[name] for name in names} if names else dump


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
    """Check the run's settings (:func:`check_pipeline`), then record (or import) the
    walkthrough videos; returns ``walkthroughs_uri``."""
    from odyssey_core.data.cli import import_entries, run_record
    from odyssey_core.data.walkthroughs import load_walkthroughs

    check_pipeline(cfg)
    config = _curate_config(cfg)
    params = _section(config, "game", "source", "record", "imports")
    if config.source == "import":  # what the imports_file lists is an input too
        params["imports"] = [e.model_dump(mode="json") for e in import_entries(config)]

    def body(ctx: StageContext) -> dict[str, Any]:
        _fresh(ctx.work / "out" / "walkthroughs")
        folder = run_record(config, ctx.work / "out")
        walkthroughs = load_walkthroughs(folder)
        frames: dict[str, int] = {}
        for w in walkthroughs:
            # one level per recorded video; an imported one is split over its segments by time
            total = sum(s["end_s"] - s["start_s"] for s in w.segments) or 1.0
            for s in w.segments:
                share = (s["end_s"] - s["start_s"]) / total
                frames[s["level"]] = frames.get(s["level"], 0) + round(w.frame_count * share)
        ctx.run.log_metrics(
            {
                "walkthroughs": float(len(walkthroughs)),
                "frames": float(sum(frames.values())),
                **{f"frames.{level}": float(n) for level, n in frames.items()},
            }
        )
        uri = ctx.publish_dir(folder, "walkthroughs", ref="walkthroughs")
        ctx.keep(folder)
        return {
            "walkthroughs_uri": uri,
            "walkthroughs": len(walkthroughs),
            "frames": sum(frames.values()),
        }

    return _run_curation(cfg, "record", body, params, parent_run_id=parent_run_id)


def stage_sample(
    cfg: PipelineConfig, walkthroughs_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Sample and pHash-dedupe frames of the walkthroughs; returns ``samples_uri``."""
    from odyssey_core.data.cli import run_sample
    from odyssey_core.data.dataset import read_table
    from odyssey_core.data.sampling import SAMPLES_FILE
    from odyssey_core.data.walkthroughs import load_walkthroughs

    config = _curate_config(cfg)
    params = _section(config, "game", "sampling")

    def body(ctx: StageContext) -> dict[str, Any]:
        out = ctx.work / "out"
        ctx.fetch_inputs(out)
        _rebase_walkthroughs(out / "walkthroughs")
        _fresh(out / "samples")
        folder = run_sample(config, out)
        per_level = _level_counts(read_table(folder / SAMPLES_FILE))
        kept = sum(per_level.values())
        recorded = sum(w.frame_count for w in load_walkthroughs(out / "walkthroughs"))
        ctx.run.log_metrics(
            {
                "frames_in": float(recorded),  # what was recorded, before sampling and dedup
                "frames_kept": float(kept),
                **{f"frames_kept.{k}": float(n) for k, n in per_level.items()},
            }
        )
        uri = ctx.publish_dir(folder, "samples", ref="samples")
        ctx.keep(folder)
        return {"samples_uri": uri, "samples": kept}

    return _run_curation(
        cfg,
        "sample",
        body,
        params,
        inputs={"walkthroughs": walkthroughs_uri},
        parent_run_id=parent_run_id,
    )


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
    params = _section(config, "game", "teacher")
    if config.sampling.target_train_rows is not None:  # the top-up reads quarantine and split
        params.update(_section(config, "validation", "val_share"))

    def body(ctx: StageContext) -> dict[str, Any]:
        ctx.fetch_inputs(ctx.work / "out")
        folder = run_annotate(config, ctx.work / "out")
        rows = pq.read_metadata(folder / ANNOTATIONS_FILE).num_rows
        metrics = read_json(folder / "teacher_metrics.json")
        # tokens, cost, cache hits, HTTP counters: whatever the teacher reports as numbers
        ctx.run.log_metrics(numeric({**metrics, "annotations": rows}))
        uri = ctx.publish_dir(folder, "annotations", ref="annotations")
        ctx.keep(folder)
        return {"annotations_uri": uri, "annotations": rows}

    return _run_curation(
        cfg, "annotate", body, params, inputs={"samples": samples_uri}, parent_run_id=parent_run_id
    )


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
    from odyssey_core.data.validation import DATA_DOCS_DIR, ValidationFailed

    config = _curate_config(cfg)
    params = _section(config, "game", "validation")

    def body(ctx: StageContext) -> dict[str, Any]:
        ctx.fetch_inputs(ctx.work / "out")
        target = _fresh(ctx.work / "out" / "validation")

        def log_report() -> dict[str, Any]:
            report = read_json(target / VALIDATION_JSON)
            summary = report.get("summary", {})
            # a top-level flag makes log_validation_report tag the run validation.curate
            ctx.run.log_validation_report({**report, "ok": bool(summary.get("success"))}, "curate")
            if (target / VALIDATION_HTML).is_file():
                ctx.run.log_artifact(target / VALIDATION_HTML, "reports")
            if (target / DATA_DOCS_DIR).is_dir():  # GX's whole Data Docs site
                ctx.run.log_artifact(target / DATA_DOCS_DIR, f"reports/{DATA_DOCS_DIR}")
            ctx.run.log_metrics(
                numeric(
                    {k: summary.get(k) for k in ("rows", "passed", "quarantined", "failed_share")}
                )
            )
            return summary

        try:
            folder = run_validate(config, ctx.work / "out")
        except ValidationFailed:
            if (target / VALIDATION_JSON).is_file():
                log_report()  # the reason is what one wants to see on a failed run
            raise
        summary = log_report()
        uri = ctx.publish_dir(folder, "validation", ref="validation")
        ctx.keep(folder)
        return {
            "validation_uri": uri,
            "passed": int(summary.get("passed", 0)),
            "quarantined": int(summary.get("quarantined", 0)),
        }

    return _run_curation(
        cfg,
        "validate",
        body,
        params,
        inputs={"annotations": annotations_uri, "samples": samples_uri},
        parent_run_id=parent_run_id,
    )


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
    # the manifest records the whole curation config, so all of it is an input here
    params = _section(config)

    def body(ctx: StageContext) -> dict[str, Any]:
        ctx.fetch_inputs(ctx.work / "out")
        _fresh(ctx.work / "out" / "dataset")
        dataset = run_build(config, ctx.work / "out")
        manifest = json.loads((dataset / "manifest.json").read_text())
        uri = ctx.publish_dir(dataset, "dataset")
        ctx.run.log_dataset_manifest({**manifest, "uri": uri}, "sft")
        num_samples = int(manifest.get("num_samples", 0))
        metrics = {
            "num_samples": float(num_samples),
            "num_quarantined": float(manifest.get("num_quarantined", 0)),
        }
        for split, n in manifest.get("splits", {}).items():
            metrics[f"samples.{split}"] = float(n)
        for level, splits in manifest.get("levels", {}).items():
            metrics[f"samples.{level}"] = float(sum(splits.values()))
        ctx.run.log_metrics(metrics)
        ctx.keep(dataset)
        return {"dataset_uri": uri, "num_samples": num_samples}

    inputs = {"validation": validation_uri, "samples": samples_uri, "annotations": annotations_uri}
    return _run_curation(
        cfg, "build-dataset", body, params, inputs=inputs, parent_run_id=parent_run_id
    )


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


# -- SFT and RL ---------------------------------------------------------------------------------


def stage_sft(
    cfg: PipelineConfig, dataset_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Fine-tune the base model on the dataset; returns ``model_uri`` and ``base_model_uri``.
    With ``launch`` asking for several processes, training runs under the launcher."""
    from odyssey_core.sft.settings import load_sft_settings

    settings = load_sft_settings(cfg.sft.preset, cfg.sft.overrides)

    def body(ctx: StageContext) -> dict[str, Any]:
        dataset = ctx.fetch("dataset", ctx.work / "dataset")
        if cfg.sft.base_model is not None:
            base = Path(cfg.sft.base_model)
        else:
            from odyssey_core.models.tiny import ensure_tiny_model

            base = ensure_tiny_model(ctx.work / "base-model", seed=0)

        bar = step_bar("sft")

        def on_metrics(metrics: dict[str, Any]) -> None:
            ctx.log_sft_metrics(metrics)
            step = metrics.get("step")
            if step is not None and "loss" in metrics:
                advance(bar, int(step), loss=float(metrics["loss"]))

        # resume=True: a retried or resumed run picks up the latest SFT checkpoint
        train_dir = ctx.training_dir()
        with bar:
            result = sft_here_or_launched(
                settings, dataset, base, train_dir, on_metrics=on_metrics, emit=log.info
            )
        final = {"steps": float(result.steps)}
        for name in ("train_loss", "eval_loss"):
            if getattr(result, name) is not None:
                final[f"final_{name}"] = float(getattr(result, name))
        ctx.run.log_metrics(final)
        model_uri = ctx.publish_dir(result.final_dir, "model", ref="model")
        base_uri = ctx.publish_dir(base, "base-model")
        ctx.keep(result.final_dir)
        return {"model_uri": model_uri, "base_model_uri": base_uri, "steps": result.steps}

    # the dataset's publication is an input: a rebuilt dataset (same URI) retrains
    return run_stage(
        cfg,
        "sft",
        body,
        config=[settings.model_dump(mode="json"), cfg.sft.base_model],
        inputs={"dataset": dataset_uri},
        params=settings,
        parent_run_id=parent_run_id,
    )


def stage_rl(
    cfg: PipelineConfig, model_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """RL from the SFT model, resuming from the latest checkpoint; returns ``checkpoint_uri``.
    With ``launch`` asking for several processes, training runs under the launcher."""
    from odyssey_core.recipes.odysseus.train import build_trainer
    from odyssey_core.rl.checkpoint import policy_dir

    def body(ctx: StageContext) -> dict[str, Any]:
        sft_model = ctx.fetch("model", ctx.work / "sft-model")
        settings = _rl_settings(cfg, {"model": {"path": str(sft_model.resolve())}})
        ctx.run.log_params(settings)
        bar = step_bar("rl", settings.steps)

        def on_step(step: int, metrics: dict[str, float]) -> None:
            ctx.log_step(step, metrics)
            progress = metrics.get("all/progress_mean", float("nan"))
            advance(bar, step, progress=progress)

        train_dir = ctx.training_dir()
        with bar:
            train_here_or_launched(
                "odysseus", settings, build_trainer, train_dir, on_step=on_step, emit=log.info
            )
        checkpoint, steps = finished_checkpoint(train_dir, "RL")
        # The policy folder is what an hf: agent (and the registry) needs; the optimizer state
        # stays local for resuming. Its key names the inputs, so a registered version keeps
        # pointing at the weights it was gated on when a later run of this pipeline trains anew.
        uri = ctx.publish_dir(policy_dir(checkpoint), f"checkpoint-{ctx.tag}", ref="checkpoint")
        ctx.run.log_metrics({"steps": float(steps)})
        ctx.keep(checkpoint)
        return {
            "checkpoint_uri": uri,
            "steps": steps,
            "checkpoint": checkpoint.name,
            "mlflow_run_id": ctx.run.run_id,  # its metrics are the report's training curves
        }

    # the SFT model's publication is an input: a retrained SFT model (same URI) trains RL again
    return run_stage(
        cfg,
        "rl",
        body,
        config=[cfg.train.model_dump(mode="json")],
        inputs={"model": model_uri},
        parent_run_id=parent_run_id,
    )


# -- evaluate and promote -----------------------------------------------------------------------


def _episode_scores(results: Any, agent: str) -> list[float]:
    """Per-episode progress made (from every section that ran), the gate's sample."""
    return [
        float(r.gained)
        for section in results.sections
        if section.skipped is None
        for r in section.records.get(agent, [])
        if r.error is None
    ]


def evaluate_models(
    cfg: PipelineConfig,
    models: Mapping[str, str],
    out_dir: Path,
    *,
    training_run_id: str | None = None,
    summary: Callable[[Mapping[str, list[float]]], list[str]] | None = None,
) -> dict[str, Any]:
    """Evaluate model folders of the store (``label -> URI``) together on the configured
    suite, no marker, with the RL preset's inference settings: one suite run, so every model
    plays the same episodes, and one report with a row per label. Returns the per-episode
    scores and mean of each label, the flat metrics, the report folder and the inference
    settings used. The report is the full one: the tables, their bar plots, the suite's
    annotated episode videos, the lines ``summary(scores)`` writes, and the training curves of
    ``training_run_id`` (the MLflow run that trained the models) when given."""
    from odyssey_core.eval.agents import build_policy_agent, parse_agent_spec
    from odyssey_core.eval.report import write_report
    from odyssey_core.eval.runner import evaluate_suite
    from odyssey_core.eval.suites import load_suite

    if not models:
        raise ValueError("evaluate_models needs at least one model (label -> URI)")
    out_dir.mkdir(parents=True, exist_ok=True)
    suite = load_suite(cfg.eval.suite, cfg.eval.overrides)
    inference = pipeline_inference(cfg)
    agents = []
    for label, uri in models.items():
        dest = out_dir / "model" if len(models) == 1 else out_dir / "models" / label
        model = fetch(cfg, uri, dest)
        spec = parse_agent_spec(f"hf:{model.resolve()}", label=label)
        agents.append(build_policy_agent(spec, game=cfg.game, inference=inference))
    results = evaluate_suite(suite, agents, runs=cfg.eval.runs, vector=cfg.eval.vector)
    scores = {label: _episode_scores(results, label) for label in models}
    training_run = None if training_run_id is None else (cfg.mlflow_uri, training_run_id)
    report = write_report(
        results,
        out_dir / "report",
        training_run=training_run,
        summary=summary(scores) if summary is not None else (),
    )
    return {
        "scores": scores,
        "means": {k: statistics.fmean(v) if v else float("nan") for k, v in scores.items()},
        "metrics": numeric(results.metrics()),
        "report_dir": str(out_dir / "report"),
        "report_markdown": str(report.markdown),
        "inference": inference.model_dump(mode="json"),
    }


def evaluate_checkpoint(
    cfg: PipelineConfig,
    model_uri: str,
    label: str,
    out_dir: Path,
    *,
    training_run_id: str | None = None,
) -> dict[str, Any]:
    """Evaluate one model folder of the store (:func:`evaluate_models` with one label): returns
    its per-episode scores (also written to ``out_dir/scores.json``), their mean, the flat
    metrics, the report folder and the inference settings used."""
    evaluated = evaluate_models(cfg, {label: model_uri}, out_dir, training_run_id=training_run_id)
    scores = evaluated["scores"][label]
    (out_dir / "scores.json").write_text(json.dumps({"label": label, "scores": scores}))
    return {
        **{k: v for k, v in evaluated.items() if k not in ("scores", "means")},
        "scores": scores,
        "mean": evaluated["means"][label],
    }


def rl_effect(scores: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """What RL did on the evaluate stage's episodes: the candidate's mean minus the SFT model's,
    its standard error, and Welch's one-sided t-test of "the candidate is ahead"
    (``rl_effect``, ``rl_effect_se``, ``rl_effect_t``, ``rl_effect_p``; NaN where a sample is
    too small)."""
    from scipy import stats

    candidate = [float(x) for x in scores["candidate"]]
    sft = [float(x) for x in scores["sft"]]
    nan = float("nan")
    if min(len(candidate), len(sft)) < 2:
        return {"rl_effect": nan, "rl_effect_se": nan, "rl_effect_t": nan, "rl_effect_p": nan}
    difference = statistics.fmean(candidate) - statistics.fmean(sft)
    se = statistics.variance(candidate) / len(candidate) + statistics.variance(sft) / len(sft)
    test = stats.ttest_ind(candidate, sft, equal_var=False, alternative="greater")
    return {
        "rl_effect": difference,
        "rl_effect_se": se**0.5,
        "rl_effect_t": float(test.statistic),
        "rl_effect_p": float(test.pvalue),
    }


def _rl_effect_lines(scores: Mapping[str, list[float]]) -> list[str]:
    if "sft" not in scores or "candidate" not in scores:
        return []
    effect = rl_effect(scores)
    means = {label: statistics.fmean(s) if s else float("nan") for label, s in scores.items()}
    lines = [
        "Rows: `base` is the untrained base model, `sft` the SFT model RL started from, "
        "`candidate` the RL checkpoint; all play the same episodes, progress made per episode "
        "(from every section).",
        "",
        "| model | episodes | mean progress made |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {len(s)} | {means[label]:.2f} |" for label, s in scores.items()]
    lines += [
        "",
        f"RL's effect (candidate - sft): {effect['rl_effect']:+.2f} ± {effect['rl_effect_se']:.2f}"
        f" (Welch t {effect['rl_effect_t']:.2f}, one-sided p {effect['rl_effect_p']:.3g}).",
    ]
    return lines


def evaluate_model(cfg: PipelineConfig, model_ref: str, label: str, out_dir: Path) -> Evaluation:
    """The recipe's evaluation of one model: the pipeline's suite with the RL preset's inference
    settings (:func:`evaluate_checkpoint`); the gate's sample is the per-episode progress."""
    evaluated = evaluate_checkpoint(cfg, model_ref, label, out_dir)
    return Evaluation(
        scores=[float(x) for x in evaluated["scores"]],
        summary={"mean_progress": float(evaluated["mean"]), **evaluated["metrics"]},
        report=Path(evaluated["report_markdown"]),
        details=evaluated,
    )


def _rows_together(cfg: PipelineConfig, training_run_id: str | None) -> RowsEvaluator:
    """The rows in one suite run (:func:`evaluate_models`): every model plays the same
    episodes, and one report, in the candidate's folder, has a row per label and RL's
    effect."""

    def evaluate(models: Mapping[str, str], out_dir: Path) -> dict[str, Evaluation]:
        evaluated = evaluate_models(
            cfg,
            models,
            out_dir / "candidate",
            training_run_id=training_run_id,
            summary=_rl_effect_lines,
        )
        return {
            label: Evaluation(
                scores=evaluated["scores"][label],
                summary={"mean_progress": evaluated["means"][label], **evaluated["metrics"]},
                report=Path(evaluated["report_markdown"]),
                details=evaluated,
            )
            for label in models
        }

    return evaluate


def _rl_effect_of(evaluations: Mapping[str, Evaluation]) -> dict[str, float]:
    if "sft" not in evaluations:
        return {}
    return rl_effect({label: e.scores for label, e in evaluations.items()})


def stage_evaluate(
    cfg: PipelineConfig,
    checkpoint_uri: str,
    *,
    sft_model_uri: str | None = None,
    base_model_uri: str | None = None,
    training_run_id: str | None = None,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Evaluate the RL checkpoint (row ``candidate``) and, when given, the base model (``base``)
    and the SFT model RL started from (``sft``) on the same episodes
    (:func:`odyssey_core.stages.evaluate_stage`); returns ``report_uri``, ``scores_uri``, the
    candidate's ``mean_progress``, each other row's ``<row>_mean`` and RL's effect
    (:func:`rl_effect`: candidate minus sft). The whole report (tables, plots, videos, RL's
    effect, and the curves of ``training_run_id``, the RL stage's MLflow run) is logged to the
    stage's MLflow run and published."""
    # how the model answers is part of what the stage depends on
    params = {
        **cfg.eval.model_dump(mode="json"),
        "inference": pipeline_inference(cfg).model_dump(mode="json"),
    }
    return evaluate_stage(
        cfg,
        RECIPES.get("odysseus"),
        {"base": base_model_uri, "sft": sft_model_uri, "candidate": checkpoint_uri},
        evaluate_rows=_rows_together(cfg, training_run_id),
        summary_keys=("mean_progress",),
        extra=_rl_effect_of,
        config=[params],
        params=params,
        parent_run_id=parent_run_id,
    )


def _serving(cfg: PipelineConfig) -> dict[str, Any]:
    """How the registered MLflow Model answers: the RL preset's inference settings."""
    inference = pipeline_inference(cfg)
    return serving_fields(inference, inference.max_new_tokens)


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
    model's (the evaluate stage's base row when it played one)
    (:func:`odyssey_core.stages.register_stage`). Returns the version, the decision and its
    reason."""
    return register_stage(
        cfg,
        RECIPES.get("odysseus"),
        checkpoint_uri,
        evaluation,
        base_model_uri,
        stage="promote",
        score_keys=(SCORE_KEY.removeprefix("eval."), "episodes"),
        tags={"odyssey.suite": cfg.eval.suite},
        serving=_serving(cfg),
        config=[cfg.eval.model_dump(mode="json")],
        parent_run_id=parent_run_id,
    )


# -- nightly evaluation -------------------------------------------------------------------------


#: evaluate the champion (and the candidate, if any) on the suite and log each mean progress as
#: one more point of the ``nightly-<game>`` series
nightly_evaluate = nightly_evaluator(
    "odysseus", lambda cfg: SCORE_KEY.removeprefix("eval."), log_fn=log.info
)

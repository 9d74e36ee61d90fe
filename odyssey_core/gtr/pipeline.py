"""The GTR training pipeline as plain functions: train -> evaluate -> register (+ promotion gate).

It follows :mod:`odyssey_core.pipeline` (the Odysseus pipeline) and reuses its helpers: each
stage works in ``<run_dir>/<stage>/``, publishes its outputs to the artifact store under
``runs/<run_id>/<stage>/``, logs a nested MLflow stage run, returns small dicts of URIs and
numbers, and writes ``done.json`` (outputs + a fingerprint of the inputs) last, so a rerun with
the same inputs returns the recorded outputs without redoing the work.

* ``train``: :class:`~odyssey_core.gtr.trainer.GTRTrainer` with ``resume=True`` in a folder
  named after the settings' fingerprint (a retry continues its own run; changed settings start
  a new one). Publishes the policy as a plain model folder (a LoRA adapter is merged first),
  named after the fingerprint too, so a changed training never reuses a stale local copy.
* ``evaluate``: ``eval.episodes`` episodes on the training env with fixed deal seeds: success
  rate ± s.e., mean task return ± s.e., thought-collapse metrics; per-episode scores + report.
* ``register``: a new version of the registered model ``<prefix>-<game>`` (``game`` is e.g.
  ``gtr-points24``), then :meth:`ModelRegistry.promote` on the per-episode ``promotion.metric``
  against the champion re-evaluated on the same deals or, for the first model, the base model.

The helpers of :mod:`odyssey_core.pipeline` take its ``PipelineConfig`` but read only the run
fields (``run_dir``, ``run_id``, ``artifact_uri``, ``tracking_uri``, ``experiment``), which
:class:`GTRPipelineConfig` has too. Imports no Prefect (``flows/gtr.py`` and ``tasks/gtr.py``
wrap it).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from odyssey_core.config import load_preset
from odyssey_core.pipeline import (
    RunConfig,
    _fetch,
    _finished,
    _mark_done,
    _numeric,
    _store,
    fingerprint,
    make_tracker,
)

__all__ = [
    "GTRPipelineConfig",
    "evaluate_gtr_model",
    "load_gtr_pipeline_config",
    "stage_gtr_evaluate",
    "stage_gtr_register",
    "stage_gtr_train",
]

GTR_STAGES = ("train", "evaluate", "register")
# the evaluation numbers a registered version carries as ``metric.eval.<key>`` tags
_SUMMARY_KEYS = ("episodes", "success_rate", "success_se", "mean_return", "return_se")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GTRTrainStage(_Model):
    preset: str = Field(default="tiny", description="a preset under configs/gtr/ or a YAML path")
    overrides: dict[str, Any] = Field(default_factory=dict)


class GTREvalStage(_Model):
    episodes: int = Field(default=16, ge=2, description="episodes per evaluated model")
    seed: int = Field(
        default=2**40,
        ge=0,
        description="deal seeds seed, seed+1, ...: far from the training deals (seed*1000003+k)",
    )
    n_envs: int = Field(default=4, ge=1, description="episodes played side by side (batched)")
    env_kwargs: dict[str, Any] | None = Field(
        default=None, description="None: the training env's kwargs"
    )
    generation: dict[str, Any] = Field(
        default_factory=dict, description="laid over the training generation params"
    )


class GTRPromotionStage(_Model):
    metric: Literal["return", "success"] = Field(
        default="return", description="the per-episode sample the gate compares"
    )
    margin: float | None = Field(default=None, ge=0, description="None: registry settings")
    alpha: float | None = Field(default=None, gt=0, lt=1)


class GTRPipelineConfig(RunConfig):
    """One GTR pipeline run (``configs/gtr_pipeline/*.yaml``)."""

    name: str = "gtr-tiny"
    game: str = Field(default="gtr-numberline", description="registered model <prefix>-<game>")
    run_dir: Path = Path("out/gtr/tiny")
    experiment: str = "odyssey/train_gtr"
    train: GTRTrainStage = GTRTrainStage()
    eval: GTREvalStage = GTREvalStage()
    promotion: GTRPromotionStage = GTRPromotionStage()


def load_gtr_pipeline_config(
    preset: str | Path = "tiny", overrides: Mapping[str, Any] | None = None
) -> GTRPipelineConfig:
    """A preset name under ``configs/gtr_pipeline/`` or a YAML path, plus nested overrides."""
    return load_preset(
        GTRPipelineConfig, preset, dict(overrides or {}), kind="gtr_pipeline", what="GTR pipeline"
    )


def _train_settings(cfg: GTRPipelineConfig) -> Any:
    from odyssey_core.gtr.settings import load_gtr_settings

    return load_gtr_settings(cfg.train.preset, cfg.train.overrides)


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _local_model(cfg: GTRPipelineConfig, ref: str, work: Path) -> Path:
    """A local folder for a model reference: a store URI (fetched into a folder named after the
    URI, so a different model never reuses another's copy) or a local path."""
    if "://" not in ref:
        return Path(ref)
    return _fetch(cfg, ref, work / f"model-{_short(ref)}")


# -- train --------------------------------------------------------------------------------------


def stage_gtr_train(cfg: GTRPipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """GTR training with resume; returns ``checkpoint_uri`` (a plain model folder) and
    ``base_model`` (a store URI for the built tiny model, else the configured local path)."""
    from odyssey_core.gtr.trainer import GTRTrainer
    from odyssey_core.models.lora import merge_and_save
    from odyssey_core.rl.checkpoint import latest_checkpoint, policy_dir

    work = cfg.stage_dir("train")
    settings = _train_settings(cfg)
    key = fingerprint("gtr-train", cfg.run_key, settings.model_dump(mode="json"))
    if (done := _finished(work, key)) is not None:
        return done
    tag = key[:12]
    train_dir = work / f"run-{tag}"
    tracker = make_tracker(cfg)
    with tracker.stage_run("train", parent_run_id=parent_run_id, params=settings) as run:

        def on_step(step: int, metrics: dict[str, float]) -> None:
            run.log_metrics(_numeric(metrics), step=step)

        trainer = GTRTrainer.from_settings(settings, train_dir, resume=True)
        try:
            trainer.train(on_step=on_step)
            steps = trainer.step
            checkpoint = latest_checkpoint(train_dir)
            if checkpoint is None:
                raise RuntimeError(f"GTR finished without a checkpoint under {train_dir}")
            model_dir = policy_dir(checkpoint)
            if settings.lora is not None:  # an adapter alone cannot be evaluated or served
                model_dir = work / f"merged-{tag}"
                shutil.rmtree(model_dir, ignore_errors=True)
                merge_and_save(
                    trainer.policy.model, model_dir, trainer.policy.processor, inplace=True
                )
        finally:
            trainer.close()
        store = _store(cfg, "train")
        uri = store.put_dir(model_dir, f"checkpoint-{tag}")
        if settings.model.path is None:  # the tiny model built for this run: publish it
            base = store.put_dir(train_dir / "base-model", f"base-model-{tag}")
        else:
            base = str(Path(settings.model.path).resolve())
        run.log_artifact_ref("checkpoint", uri)
        run.log_metrics({"steps": float(steps)})
        outputs = {
            "checkpoint_uri": uri,
            "base_model": base,
            "steps": steps,
            "checkpoint": checkpoint.name,
        }
    return _mark_done(work, key, outputs, [checkpoint])


# -- evaluate -----------------------------------------------------------------------------------


def _eval_inputs(cfg: GTRPipelineConfig) -> dict[str, Any]:
    """What an evaluation depends on besides the model: the eval section and the env, prompt
    and generation settings it takes from the training preset."""
    s = _train_settings(cfg)
    return {
        "eval": cfg.eval.model_dump(mode="json"),
        "env": s.rollout.env,
        "env_kwargs": cfg.eval.env_kwargs
        if cfg.eval.env_kwargs is not None
        else s.rollout.env_kwargs,
        "generation": s.rollout.generation.model_copy(update=cfg.eval.generation).model_dump(
            mode="json"
        ),
        "model": s.model.model_dump(mode="json", exclude={"path"}),
    }


def _report_markdown(label: str, summary: Mapping[str, float], warnings: list[str]) -> str:
    def pm(mean: float, se: float) -> str:
        return f"{mean:.3f} ± {se:.3f}" if math.isfinite(se) else f"{mean:.3f}"

    lines = [
        f"### GTR evaluation: {label}",
        "",
        "| episodes | success rate ± s.e. | mean return ± s.e. | mean length | invalid rate |",
        "|---|---|---|---|---|",
        f"| {int(summary['episodes'])} | {pm(summary['success_rate'], summary['success_se'])} "
        f"| {pm(summary['mean_return'], summary['return_se'])} | {summary['mean_length']:.2f} "
        f"| {summary['invalid_rate']:.3f} |",
        "",
        "| thought-collapse metric | value |",
        "|---|---|",
    ]
    for key, value in summary.items():
        if key.startswith("collapse/"):
            lines.append(f"| {key.removeprefix('collapse/')} | {value:.4g} |")
    if warnings:
        lines += ["", "Collapse warnings: " + "; ".join(warnings)]
    return "\n".join(lines) + "\n"


def evaluate_gtr_model(
    cfg: GTRPipelineConfig, model_ref: str, label: str, out_dir: Path
) -> dict[str, Any]:
    """Evaluate one model (store URI or local folder) as configured, no marker: the summary,
    per-episode scores (``returns``, ``successes``, ``seeds``) and the files written."""
    from odyssey_core.gtr.evaluation import evaluate_gtr_policy, load_gtr_policy
    from odyssey_core.policy.base import GenerationParams

    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = _eval_inputs(cfg)
    model = _local_model(cfg, model_ref, out_dir)
    m = _train_settings(cfg).model
    policy = load_gtr_policy(
        model,
        inputs["env"],
        image_size=m.image_size,
        image_scale=m.image_scale,
        dtype=m.dtype,
        device=m.device,
    )
    evaluation = evaluate_gtr_policy(
        policy,
        inputs["env"],
        episodes=cfg.eval.episodes,
        seed=cfg.eval.seed,
        generation=GenerationParams.model_validate(inputs["generation"]),
        env_kwargs=inputs["env_kwargs"],
        n_envs=cfg.eval.n_envs,
    )
    summary = evaluation.summary()
    scores = {
        "label": label,
        "model": model_ref,
        "seeds": evaluation.seeds,
        "returns": evaluation.returns,
        "successes": [float(s) for s in evaluation.successes],
    }
    (out_dir / "scores.json").write_text(json.dumps(scores))
    report = out_dir / "report.md"
    report.write_text(_report_markdown(label, summary, evaluation.collapse.warnings()))
    return {
        "summary": summary,
        "scores": scores,
        "scores_path": str(out_dir / "scores.json"),
        "report_markdown": str(report),
    }


def stage_gtr_evaluate(
    cfg: GTRPipelineConfig, checkpoint_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Evaluate the trained policy; returns ``scores_uri``, ``report_uri`` and the summary
    numbers (``success_rate``, ``success_se``, ``mean_return``, ``return_se``, ...)."""
    work = cfg.stage_dir("evaluate")
    params = _eval_inputs(cfg)
    key = fingerprint("gtr-evaluate", cfg.run_key, params, checkpoint_uri)
    if (done := _finished(work, key)) is not None:
        return done
    tracker = make_tracker(cfg)
    with tracker.stage_run("evaluate", parent_run_id=parent_run_id, params=params) as run:
        out = work / f"candidate-{key[:12]}"
        evaluated = evaluate_gtr_model(cfg, checkpoint_uri, "candidate", out)
        summary = evaluated["summary"]
        run.log_metrics(_numeric({f"eval.{k}": v for k, v in summary.items()}))
        run.log_artifact(evaluated["report_markdown"], "reports")
        store = _store(cfg, "evaluate")
        scores_uri = store.put_file(evaluated["scores_path"], "scores.json")
        report_uri = store.put_file(evaluated["report_markdown"], "report.md")
        outputs = {
            "scores_uri": scores_uri,
            "report_uri": report_uri,
            "scores_path": evaluated["scores_path"],
            "report_markdown": evaluated["report_markdown"],
            # success_rate, success_se, mean_return, return_se, collapse/...; NaN (e.g. the
            # agreement of a batch with no valid answer) becomes None: strict JSON, and equal to
            # itself when a cached result is compared
            **{k: v if math.isfinite(v) else None for k, v in summary.items()},
        }
    return _mark_done(work, key, outputs, [Path(evaluated["scores_path"])])


# -- register + promotion gate ------------------------------------------------------------------


def _candidate_scores(cfg: GTRPipelineConfig, evaluation: Mapping[str, Any], dest: Path) -> dict:
    path = Path(evaluation.get("scores_path", ""))
    if not path.is_file():  # another worker evaluated: read the published copy
        store = _store(cfg)
        path = store.get_file(store.key_for(evaluation["scores_uri"]), dest)
    return json.loads(path.read_text())


def _sample(scores: Mapping[str, Any], metric: str) -> list[float]:
    return [float(x) for x in scores["returns" if metric == "return" else "successes"]]


def stage_gtr_register(
    cfg: GTRPipelineConfig,
    checkpoint_uri: str,
    evaluation: Mapping[str, Any],
    base_model: str,
    *,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Register the checkpoint as the ``candidate`` version and run the promotion gate on the
    per-episode ``promotion.metric`` against the champion (re-evaluated now, same deals) or,
    for the first model, the base model. Returns the version, the decision and its reason."""
    from odyssey_core.registry.models import ModelRegistry

    work = cfg.stage_dir("register")
    key = fingerprint(
        "gtr-register",
        cfg.run_key,
        cfg.game,
        _eval_inputs(cfg),
        cfg.promotion.model_dump(mode="json"),
        checkpoint_uri,
        evaluation.get("scores_uri"),
        base_model,
    )
    if (done := _finished(work, key)) is not None:
        return done
    metric = cfg.promotion.metric
    candidate = _candidate_scores(cfg, evaluation, work / "candidate-scores.json")
    candidate_sample = _sample(candidate, metric)
    registry = ModelRegistry(cfg.mlflow_uri)
    with make_tracker(cfg).stage_run("register", parent_run_id=parent_run_id) as run:
        champion = registry.champion(cfg.game)
        reference_ref = registry.checkpoint_uri(cfg.game, champion) if champion else base_model
        label = "champion" if champion else "base"
        shutil.rmtree(work / label, ignore_errors=True)  # the champion may have changed
        reference = evaluate_gtr_model(cfg, reference_ref, label, work / label)
        reference_sample = _sample(reference["scores"], metric)
        summary = {
            k: float(v) for k, v in evaluation.items() if k in _SUMMARY_KEYS and v is not None
        }
        version = registry.register_checkpoint(
            checkpoint_uri,
            cfg.game,
            run_id=run.run_id,
            metrics={f"eval.{k}": v for k, v in summary.items()},
            tags={
                "odyssey.pipeline_run": cfg.run_key,
                "odyssey.recipe": "gtr",
                "odyssey.eval_seed": str(cfg.eval.seed),
            },
        )
        decision = registry.promote(
            cfg.game,
            candidate_sample,
            champion_scores=reference_sample if champion else None,
            base_scores=None if champion else reference_sample,
            margin=cfg.promotion.margin,
            alpha=cfg.promotion.alpha,
            candidate_version=version,
        )
        gate = decision.gate
        run.log_params({"reference": label, "reference_version": champion or "base"})
        run.log_params({"gate_metric": metric})
        ref_summary = reference["summary"]
        run.log_metrics(
            _numeric(
                {
                    "candidate_mean": gate.candidate.mean,
                    f"{label}_mean": gate.reference_stats.mean,
                    f"{label}_success_rate": ref_summary["success_rate"],
                    f"{label}_mean_return": ref_summary["mean_return"],
                    "version": version,
                }
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
            "metric": metric,
            "reference": label,
            "reference_version": champion,
            "champion": decision.champion,
            "candidate_mean": gate.candidate.mean,
            "reference_mean": gate.reference_stats.mean,
            "reference_success_rate": ref_summary["success_rate"],
            "reference_mean_return": ref_summary["mean_return"],
        }
    return _mark_done(work, key, outputs, [])

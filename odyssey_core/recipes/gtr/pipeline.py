"""The GTR training pipeline as plain functions: train -> evaluate -> register (+ promotion gate).

Each stage runs in the envelope of :func:`odyssey_core.stages.run_stage`, like the Odysseus
pipeline's (:mod:`odyssey_core.recipes.odysseus.pipeline`): it works in ``<run_dir>/<stage>/``,
publishes its outputs to the artifact store under ``runs/<run_id>/<stage>/``, logs a nested
MLflow stage run, returns small dicts of URIs and numbers, and writes ``done.json`` (outputs +
a fingerprint of the inputs) last, so a rerun with the same inputs returns the recorded
outputs without redoing the work.

* ``train``: :func:`~odyssey_core.recipes.gtr.train.build_trainer` with ``resume=True`` in a folder
  named after the settings' fingerprint (a retry continues its own run; changed settings start
  a new one). Publishes the policy as a plain model folder (a LoRA adapter is merged first),
  named after the fingerprint too, so a changed training never reuses a stale local copy.
* ``evaluate``: ``eval.episodes`` episodes on the training env with fixed deal seeds: success
  rate ± s.e., mean task return ± s.e., thought-collapse metrics; per-episode scores + report.
* ``register``: :func:`odyssey_core.stages.register_and_gate`: a new version of the registered
  model ``<prefix>-<game>`` (``game`` is e.g. ``gtr-points24``), gated on the per-episode
  ``promotion.metric`` against the champion re-evaluated on the same deals or, for the first
  model, the base model.

Imports no Prefect (``flows/gtr.py`` and ``tasks/gtr.py`` wrap it).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from odyssey_core.config import load_preset
from odyssey_core.stages import (
    PipelineSection,
    RunConfig,
    Stage,
    StageContext,
    fetch,
    fetch_json,
    numeric,
    register_and_gate,
    run_stage,
)

__all__ = [
    "GTR_STAGES",
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


class GTRTrainStage(PipelineSection):
    preset: str = Field(default="tiny", description="a preset under configs/gtr/ or a YAML path")
    overrides: dict[str, Any] = Field(default_factory=dict)


class GTREvalStage(PipelineSection):
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


class GTRPromotionStage(PipelineSection):
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
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    return load_gtr_settings(cfg.train.preset, cfg.train.overrides)


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _local_model(cfg: GTRPipelineConfig, ref: str, work: Path) -> Path:
    """A local folder for a model reference: a store URI (fetched into a folder named after the
    URI, so a different model never reuses another's copy) or a local path."""
    if "://" not in ref:
        return Path(ref)
    return fetch(cfg, ref, work / f"model-{_short(ref)}")


# -- train --------------------------------------------------------------------------------------


def stage_gtr_train(cfg: GTRPipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """GTR training with resume; returns ``checkpoint_uri`` (a plain model folder) and
    ``base_model`` (a store URI for the built tiny model, else the configured local path)."""
    from odyssey_core.models.lora import merge_and_save
    from odyssey_core.recipes.gtr.train import build_trainer
    from odyssey_core.rl.checkpoint import latest_checkpoint, policy_dir

    settings = _train_settings(cfg)

    def body(ctx: StageContext) -> dict[str, Any]:
        train_dir = ctx.work / f"run-{ctx.tag}"

        def on_step(step: int, metrics: dict[str, float]) -> None:
            ctx.run.log_metrics(numeric(metrics), step=step)

        trainer = build_trainer(settings, train_dir, resume=True, callbacks=[on_step])
        try:
            trainer.train()
            steps = trainer.step
            checkpoint = latest_checkpoint(train_dir)
            if checkpoint is None:
                raise RuntimeError(f"GTR finished without a checkpoint under {train_dir}")
            model_dir = policy_dir(checkpoint)
            if settings.lora is not None:  # an adapter alone cannot be evaluated or served
                model_dir = ctx.work / f"merged-{ctx.tag}"
                shutil.rmtree(model_dir, ignore_errors=True)
                merge_and_save(
                    trainer.policy.model, model_dir, trainer.policy.processor, inplace=True
                )
        finally:
            trainer.close()
        uri = ctx.publish_dir(model_dir, f"checkpoint-{ctx.tag}")
        if settings.model.path is None:  # the tiny model built for this run: publish it
            base = ctx.publish_dir(train_dir / "base-model", f"base-model-{ctx.tag}")
        else:
            base = str(Path(settings.model.path).resolve())
        ctx.run.log_artifact_ref("checkpoint", uri)
        ctx.run.log_metrics({"steps": float(steps)})
        ctx.keep(checkpoint)
        return {
            "checkpoint_uri": uri,
            "base_model": base,
            "steps": steps,
            "checkpoint": checkpoint.name,
        }

    return run_stage(
        cfg,
        Stage("train", label="gtr-train"),
        body,
        config=[settings.model_dump(mode="json")],
        params=settings,
        parent_run_id=parent_run_id,
    )


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
    from odyssey_core.policy.base import GenerationParams
    from odyssey_core.recipes.gtr.evaluation import evaluate_gtr_policy, load_gtr_policy

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
    params = _eval_inputs(cfg)

    def body(ctx: StageContext) -> dict[str, Any]:
        evaluated = evaluate_gtr_model(
            cfg, checkpoint_uri, "candidate", ctx.work / f"candidate-{ctx.tag}"
        )
        summary = evaluated["summary"]
        ctx.run.log_metrics(numeric({f"eval.{k}": v for k, v in summary.items()}))
        ctx.run.log_artifact(evaluated["report_markdown"], "reports")
        scores_uri = ctx.publish_file(evaluated["scores_path"], "scores.json")
        report_uri = ctx.publish_file(evaluated["report_markdown"], "report.md")
        ctx.keep(evaluated["scores_path"])
        return {
            "scores_uri": scores_uri,
            "report_uri": report_uri,
            "scores_path": evaluated["scores_path"],
            "report_markdown": evaluated["report_markdown"],
            # success_rate, success_se, mean_return, return_se, collapse/...; NaN (e.g. the
            # agreement of a batch with no valid answer) becomes None: strict JSON, and equal to
            # itself when a cached result is compared
            **{k: v if math.isfinite(v) else None for k, v in summary.items()},
        }

    # the checkpoint's URI names the training inputs (see stage_gtr_train)
    return run_stage(
        cfg,
        Stage("evaluate", label="gtr-evaluate"),
        body,
        config=[params, checkpoint_uri],
        params=params,
        parent_run_id=parent_run_id,
    )


# -- register + promotion gate ------------------------------------------------------------------


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
    metric = cfg.promotion.metric

    def evaluate_reference(model_ref: str, label: str, out_dir: Path) -> tuple[list[float], Any]:
        evaluated = evaluate_gtr_model(cfg, model_ref, label, out_dir)
        return _sample(evaluated["scores"], metric), evaluated

    def body(ctx: StageContext) -> dict[str, Any]:
        # the published copy when another worker evaluated
        candidate = fetch_json(
            cfg,
            evaluation.get("scores_path"),
            evaluation.get("scores_uri"),
            ctx.work / "candidate-scores.json",
        )
        summary = {
            k: float(v) for k, v in evaluation.items() if k in _SUMMARY_KEYS and v is not None
        }
        outcome = register_and_gate(
            ctx,
            game=cfg.game,
            checkpoint_uri=checkpoint_uri,
            candidate_scores=_sample(candidate, metric),
            base_model=base_model,
            evaluate_reference=evaluate_reference,
            margin=cfg.promotion.margin,
            alpha=cfg.promotion.alpha,
            metrics={f"eval.{k}": v for k, v in summary.items()},
            tags={
                "odyssey.pipeline_run": cfg.run_key,
                "odyssey.recipe": "gtr",
                "odyssey.eval_seed": str(cfg.eval.seed),
            },
        )
        gate, label = outcome.gate, outcome.reference
        ref_summary = outcome.reference_evaluation["summary"]
        ctx.run.log_params({"gate_metric": metric})
        ctx.run.log_metrics(
            numeric(
                {
                    "candidate_mean": gate.candidate.mean,
                    f"{label}_mean": gate.reference_stats.mean,
                    f"{label}_success_rate": ref_summary["success_rate"],
                    f"{label}_mean_return": ref_summary["mean_return"],
                    "version": outcome.version,
                }
            )
        )
        return {
            **outcome.outputs(),
            "metric": metric,
            "candidate_mean": gate.candidate.mean,
            "reference_mean": gate.reference_stats.mean,
            "reference_success_rate": ref_summary["success_rate"],
            "reference_mean_return": ref_summary["mean_return"],
        }

    return run_stage(
        cfg,
        Stage("register", label="gtr-register"),
        body,
        config=[
            cfg.game,
            _eval_inputs(cfg),
            cfg.promotion.model_dump(mode="json"),
            checkpoint_uri,
            evaluation.get("scores_uri"),
            base_model,
        ],
        parent_run_id=parent_run_id,
    )

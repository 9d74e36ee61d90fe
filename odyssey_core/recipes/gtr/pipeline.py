"""The GTR training pipeline as plain functions: sft -> train -> evaluate -> register (+ gate).

Each stage runs in the envelope of :func:`odyssey_core.stages.run_stage`, like the Odysseus
pipeline's (:mod:`odyssey_core.recipes.odysseus.pipeline`): it works in ``<run_dir>/<stage>/``,
publishes its outputs to the artifact store under ``runs/<run_id>/<stage>/``, logs a nested
MLflow stage run, returns small dicts of URIs and numbers, and writes ``done.json`` (outputs +
a fingerprint of the inputs) last, so a rerun with the same inputs returns the recorded
outputs without redoing the work.

* ``sft`` (GTR App. B: "all training starts from an SFT-initialized model"; ``sft.enabled``
  switches it off): ``sft.episodes`` card episodes annotated by ``sft.corrector`` (the
  programmatic solver by default, as the paper's labels come from a task solver;
  :mod:`~odyssey_core.recipes.gtr.sft_data`), then one epoch of
  :class:`odyssey_core.sft.trainer.SFTTrainer` on the base model with GTR's system prompt.
  Publishes the dataset and the fine-tuned model. :func:`stage_gtr_train` runs it first (its
  own stage run and done marker), so the ``train-gtr`` flow gets it without a task of its own.
* ``train``: :func:`~odyssey_core.recipes.gtr.train.build_trainer` with ``resume=True`` in a folder
  named after the settings' fingerprint (a retry continues its own run; changed settings start
  a new one), from the SFT model when there is one. The corrector's settings are checked
  before anything runs (a missing model, API root or key variable is named). Publishes the
  policy as a plain model folder (a LoRA adapter is merged first), named after the
  fingerprint too, so a changed training never reuses a stale local copy; the folder carries
  ``gtr_training.json``: which corrector trained it, whether that is an oracle, the SFT stage.
* ``evaluate``: ``eval.episodes`` episodes on the training env with fixed deal seeds: success
  rate ± s.e., mean task return ± s.e., thought-collapse metrics; per-episode scores + report
  (which says which corrector trained the model and whether it is an oracle).
* ``register``: :func:`odyssey_core.stages.register_stage` (``evaluate`` and the nightly run
  are the generic stages too, over :func:`evaluate_model`): a new version of the registered
  model ``<prefix>-<game>`` (``game`` is e.g. ``gtr-points24``), gated on the per-episode
  ``promotion.metric`` against the champion re-evaluated on the same deals or, for the first
  model, the base model.

Imports no Prefect (``flows/gtr.py`` and ``tasks/gtr.py`` wrap it).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from odyssey_core.config import deep_merge
from odyssey_core.recipe import RECIPES, Evaluation
from odyssey_core.recipes.gtr.corrector import (
    NO_CORRECTOR,
    build_corrector,
    check_corrector,
    describe_corrector,
)
from odyssey_core.recipes.gtr.prompts import gtr_system_prompt
from odyssey_core.recipes.gtr.settings import CorrectorChoice, load_gtr_settings
from odyssey_core.stages import (
    PIPELINE_SFT_DEFAULTS,
    PipelineSection,
    PromotionStage,
    RunConfig,
    SFTStageSection,
    Stage,
    StageContext,
    StagePreset,
    eval_model_inputs,
    evaluate_stage,
    fine_tune_base_model,
    local_copy,
    nightly_evaluator,
    numeric,
    register_stage,
    run_stage,
    serving_fields,
    sft_settings_for,
    train_servable_model,
)

__all__ = [
    "BASE_MODEL_SETTING",
    "GTR_SFT_DEFAULTS",
    "GTR_STAGES",
    "PROVENANCE_FILE",
    "GTRPipelineConfig",
    "evaluate_gtr_model",
    "evaluate_model",
    "gate_sample",
    "gtr_sft_settings",
    "load_gtr_pipeline_config",
    "nightly_evaluate",
    "read_provenance",
    "stage_gtr_evaluate",
    "stage_gtr_register",
    "stage_gtr_sft",
    "stage_gtr_train",
]

log = logging.getLogger(__name__)

GTR_STAGES = ("sft", "train", "evaluate", "register")
PROVENANCE_FILE = "gtr_training.json"  # in a trained model folder: how GTR trained it

# The SFT stage's settings (odyssey_core.sft.settings.SFTSettings) under a pipeline's
# ``sft.settings``. The paper gives one epoch (App. B) and nothing else; the rest is LLaVA's
# LoRA fine-tuning recipe (lr 2e-4, cosine, 3% warm-up, 128 samples per step), our choice.
GTR_SFT_DEFAULTS: dict[str, Any] = {
    **PIPELINE_SFT_DEFAULTS,
    "batch_size": 128,
    "grad_accum_steps": 16,
    "lr": 2e-4,
}
# the evaluation numbers a registered version carries as ``metric.eval.<key>`` tags
_SUMMARY_KEYS = ("episodes", "success_rate", "success_se", "mean_return", "return_se")


class GTRSFTStage(CorrectorChoice, SFTStageSection):
    """The SFT initialisation before GTR (App. B): corrector-annotated episodes, one epoch."""

    corrector_key: ClassVar[str] = "sft.corrector"
    sft_defaults: ClassVar[Mapping[str, Any]] = GTR_SFT_DEFAULTS

    enabled: bool = Field(default=True, description="false: RL starts from the base model")
    episodes: int = Field(default=1000, ge=1, description="card episodes played for the data")
    seed: int = Field(
        default=2**30, ge=0, description="deal seeds seed, seed+1, ...: apart from eval's"
    )
    random_action_prob: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="share of steps that play a random legal action instead of the "
        "corrector's (states off the solver's path, which RL visits)",
    )
    val_share: float = Field(default=0.05, ge=0, lt=1)
    corrector: str = Field(
        default="programmatic",
        description="who annotates: the paper's SFT labels come from a task solver, i.e. the "
        "programmatic oracle; `{name: openai, ...}` asks a VLM instead",
    )

    @model_validator(mode="after")
    def _check(self) -> GTRSFTStage:
        if self.corrector == NO_CORRECTOR:
            raise ValueError("sft.corrector: the SFT data needs a corrector to annotate it")
        return self


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


class GTRPromotionStage(PromotionStage):
    metric: Literal["return", "success"] = Field(
        default="return", description="the per-episode sample the gate compares"
    )


#: the score a registered GTR version carries (``metric.eval.<key>`` tags of the register stage)
GTR_SCORE_KEYS = {"return": "mean_return", "success": "success_rate"}


class GTRPipelineConfig(RunConfig):
    """One GTR pipeline run (``configs/gtr/pipeline/*.yaml``)."""

    preset_dir: ClassVar[str] = "gtr/pipeline"
    preset_what: ClassVar[str] = "GTR pipeline"
    preset_moved_from: ClassVar[str | None] = "gtr_pipeline"

    name: str = "gtr-tiny"
    game: str = Field(default="gtr-numberline", description="registered model <prefix>-<game>")
    run_dir: Path = Path("out/gtr/tiny")
    experiment: str = "odyssey/train_gtr"
    sft: GTRSFTStage = GTRSFTStage()
    train: StagePreset = Field(
        default=StagePreset(), description="the GTR stage: a preset under configs/gtr/"
    )
    eval: GTREvalStage = GTREvalStage()
    promotion: GTRPromotionStage = GTRPromotionStage()


BASE_MODEL_SETTING = "train.overrides.model.path"  # where a pipeline sets the base model


#: a preset name under ``configs/gtr/pipeline/`` or a YAML path, plus nested overrides
load_gtr_pipeline_config = GTRPipelineConfig.load


def _train_settings(cfg: GTRPipelineConfig) -> Any:
    return load_gtr_settings(cfg.train.preset, cfg.train.overrides)


def _serving(settings: Any) -> dict[str, Any]:
    """How the registered MLflow Model answers: the training preset's env and inference."""
    return {
        "env": settings.rollout.env,
        "env_kwargs": settings.rollout.env_kwargs,
        **serving_fields(settings.model, settings.rollout.generation.max_new_tokens),
    }


# -- provenance -----------------------------------------------------------------------------------


def _corrector_of(settings: Any) -> dict[str, Any]:
    r = settings.rollout
    return describe_corrector(r.corrector, r.corrector_kwargs)


def _annotator(cfg: GTRPipelineConfig) -> dict[str, Any]:
    return describe_corrector(cfg.sft.corrector, cfg.sft.corrector_kwargs)


def _corrector_fields(described: Mapping[str, Any] | None) -> dict[str, Any]:
    """A corrector's description (:func:`describe_corrector`; None: no corrector) as a stage's
    and a score file's ``corrector`` and ``corrector_oracle``."""
    described = described or {}
    return {"corrector": described.get("name"), "corrector_oracle": described.get("oracle")}


def _corrector_server(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """What a corrector resolved to from the environment, as a stage fingerprints it: its
    model and server, never a key (another model behind the same preset trains anew)."""
    return {k: resolved[k] for k in ("model", "base_url") if k in resolved}


def read_provenance(model_dir: str | Path) -> dict[str, Any] | None:
    """How GTR trained the model in ``model_dir`` (its ``gtr_training.json``), or None (e.g.
    the base model)."""
    path = Path(model_dir) / PROVENANCE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _provenance_lines(provenance: Mapping[str, Any] | None) -> list[str]:
    if provenance is None:
        return ["Training: not a GTR-trained model (e.g. the base model before SFT and RL)."]
    corrector = provenance["corrector"]
    lines = [f"Trained by GTR (`{provenance.get('preset')}`) with corrector {corrector['label']}."]
    if corrector.get("oracle"):
        lines.append(
            "**Oracle corrector**: its corrections are exact, which the paper's VLM corrector's "
            "are not; read these numbers as an upper bound for GTR with a real corrector."
        )
    sft = provenance.get("sft")
    if sft:
        lines.append(
            f"SFT-initialised: {sft['epochs']} epoch(s) on {sft['samples']} steps of "
            f"{sft['episodes']} card episodes annotated by {sft['corrector']['label']}."
        )
    else:
        lines.append("Not SFT-initialised: RL started from the base model.")
    return lines


# -- sft ----------------------------------------------------------------------------------------


def gtr_sft_settings(cfg: GTRPipelineConfig, settings: Any | None = None) -> Any:
    """The SFT stage's SFTSettings: GTR_SFT_DEFAULTS, then the training preset's model
    (dtype, device, frame size: the policy RL trains), then ``sft.settings``."""
    model = (settings or _train_settings(cfg)).model
    return sft_settings_for(model, GTR_SFT_DEFAULTS, cfg.sft.settings)


def stage_gtr_sft(cfg: GTRPipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """Annotate card episodes with ``sft.corrector`` and fine-tune the base model on them;
    returns ``model_uri`` (the SFT model), ``base_model_uri``, ``dataset_uri`` and counts."""
    from odyssey_core.recipes.gtr.sft_data import collect_corrector_episodes, sft_game

    settings = _train_settings(cfg)
    settings.check_base_model(BASE_MODEL_SETTING)  # a paper preset's base model, first
    sft_settings = gtr_sft_settings(cfg, settings)
    r, sft = settings.rollout, cfg.sft
    resolved = check_corrector(sft.corrector, sft.corrector_kwargs, where="sft.corrector")
    annotator = _annotator(cfg)

    def body(ctx: StageContext) -> dict[str, Any]:
        dataset_dir = ctx.work / f"dataset-{ctx.tag}"
        if not (dataset_dir / "manifest.json").is_file():  # a retry reuses a finished dataset
            shutil.rmtree(dataset_dir, ignore_errors=True)
            corrector = build_corrector(sft.corrector, sft.corrector_kwargs, where="sft.corrector")
            assert corrector is not None
            collect_corrector_episodes(
                r.env,
                r.env_kwargs,
                corrector,
                dataset_dir,
                episodes=sft.episodes,
                seed=sft.seed,
                random_action_prob=sft.random_action_prob,
                val_share=sft.val_share,
                teacher=annotator["name"],
            )
            ctx.run.log_metrics(
                numeric({f"corrector/{k}": v for k, v in corrector.metrics().items()})
            )
        manifest = json.loads((dataset_dir / "manifest.json").read_text())
        prompts = {sft_game(r.env): gtr_system_prompt(r.env, r.env_kwargs)}
        tuned = fine_tune_base_model(
            ctx, settings, sft_settings, dataset_dir, system_prompts=prompts
        )
        samples = int(manifest["num_samples"])
        ctx.run.log_metrics({"samples": float(samples), "sft_steps": float(tuned.result.steps)})
        dataset_uri = ctx.publish_dir(dataset_dir, f"dataset-{ctx.tag}", ref="dataset")
        ctx.keep(dataset_dir)
        return {
            "model_uri": tuned.model_uri,
            "base_model_uri": tuned.base_model_uri,
            "dataset_uri": dataset_uri,
            "samples": samples,
            "steps": tuned.result.steps,
            **_corrector_fields(annotator),
        }

    return run_stage(
        cfg,
        Stage("sft", label="gtr-sft"),
        body,
        config=[
            sft.model_dump(mode="json"),
            sft_settings.model_dump(mode="json"),
            settings.model.model_dump(mode="json"),
            r.env,
            r.env_kwargs,
            _corrector_server(resolved),
        ],
        params=sft_settings,
        parent_run_id=parent_run_id,
    )


# -- train --------------------------------------------------------------------------------------


def stage_gtr_train(cfg: GTRPipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """GTR training with resume, after the SFT stage when ``sft.enabled``; returns
    ``checkpoint_uri`` (a plain model folder), ``base_model`` (the model before SFT and RL: a
    store URI for the built tiny model, else the configured local path) and ``sft_model``."""
    from odyssey_core.recipes.gtr.train import build_trainer

    settings = _train_settings(cfg)
    r = settings.rollout
    # a paper preset's base model and the settings the run reads from the environment, checked
    # before any work (SFT included) and before any request
    settings.check_base_model(BASE_MODEL_SETTING)
    resolved = check_corrector(r.corrector, r.corrector_kwargs, where="rollout.corrector")
    sft = stage_gtr_sft(cfg, parent_run_id=parent_run_id) if cfg.sft.enabled else None
    corrector = describe_corrector(r.corrector, r.corrector_kwargs, resolved)  # the model used

    def body(ctx: StageContext) -> dict[str, Any]:
        run_settings = settings
        if sft is not None:  # RL starts from the SFT model
            sft_model = ctx.fetch("sft_model", ctx.work / f"sft-model-{ctx.tag}")
            overrides = deep_merge(cfg.train.overrides, {"model": {"path": str(sft_model)}})
            run_settings = load_gtr_settings(cfg.train.preset, overrides)

        trained = train_servable_model(
            ctx,
            "gtr",
            run_settings,
            build_trainer,
            system_prompt=gtr_system_prompt(r.env, r.env_kwargs),
            sft_base_model=None if sft is None else sft["base_model_uri"],
        )
        provenance = {
            "recipe": "gtr",
            "preset": str(cfg.train.preset),
            "env": r.env,
            "steps": trained.steps,
            "corrector": corrector,
            "sft": None
            if sft is None
            else {
                "corrector": _annotator(cfg),
                "samples": sft["samples"],
                "episodes": cfg.sft.episodes,
                "epochs": gtr_sft_settings(cfg, settings).epochs,
            },
        }
        (trained.model_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2))
        uri = ctx.publish_dir(trained.model_dir, f"checkpoint-{ctx.tag}", ref="checkpoint")
        ctx.run.log_metrics({"steps": float(trained.steps)})
        ctx.keep(trained.checkpoint)
        return {
            "checkpoint_uri": uri,
            "base_model": trained.base_model,
            "sft_model": None if sft is None else sft["model_uri"],
            "steps": trained.steps,
            "checkpoint": trained.checkpoint.name,
            **_corrector_fields(corrector),
        }

    # the SFT model's publication is an input: a retrained SFT model (same URI) trains again
    return run_stage(
        cfg,
        Stage("train", label="gtr-train"),
        body,
        config=[settings.model_dump(mode="json"), _corrector_server(resolved)],
        inputs=None if sft is None else {"sft_model": sft["model_uri"]},
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
        **eval_model_inputs(s, cfg.eval.generation),
    }


def _report_markdown(
    label: str,
    summary: Mapping[str, float],
    warnings: list[str],
    provenance: Mapping[str, Any] | None = None,
) -> str:
    def pm(mean: float, se: float) -> str:
        return f"{mean:.3f} ± {se:.3f}" if math.isfinite(se) else f"{mean:.3f}"

    lines = [
        f"### GTR evaluation: {label}",
        "",
        *_provenance_lines(provenance),
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
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.recipes.gtr.evaluation import evaluate_gtr_policy

    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = _eval_inputs(cfg)
    model = local_copy(cfg, model_ref, out_dir)
    m = _train_settings(cfg).model
    policy = HFPolicy.for_evaluation(
        model,
        gtr_system_prompt(inputs["env"], inputs["env_kwargs"]),
        image_size=m.image_size,
        image_scale=m.image_scale,
        dtype=m.dtype,
        device=m.device,
    )
    provenance = read_provenance(model)
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
    trained_with = None if provenance is None else provenance["corrector"]
    scores = {
        "label": label,
        "model": model_ref,
        **_corrector_fields(trained_with),
        "seeds": evaluation.seeds,
        "returns": evaluation.returns,
        "successes": [float(s) for s in evaluation.successes],
    }
    (out_dir / "scores.json").write_text(json.dumps(scores))
    # the report in a folder of its own: the evaluation folder also holds the fetched model
    report = out_dir / "report" / "report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(_report_markdown(label, summary, evaluation.collapse.warnings(), provenance))
    return {
        "provenance": provenance,
        "summary": summary,
        "scores": scores,
        "scores_path": str(out_dir / "scores.json"),
        "report_markdown": str(report),
    }


def evaluate_model(cfg: GTRPipelineConfig, model_ref: str, label: str, out_dir: Path) -> Evaluation:
    """The recipe's evaluation of one model (:func:`evaluate_gtr_model`): the gate's sample is
    the per-episode ``promotion.metric`` (return or success)."""
    evaluated = evaluate_gtr_model(cfg, model_ref, label, out_dir)
    return Evaluation(
        scores=gate_sample(evaluated["scores"], cfg.promotion.metric),
        summary={k: float(v) for k, v in evaluated["summary"].items()},
        report=Path(evaluated["report_markdown"]),
        details=evaluated,
    )


def _trained_with(evaluations: Mapping[str, Evaluation]) -> dict[str, Any]:
    """Which corrector trained the candidate (from the provenance in its model folder)."""
    provenance = evaluations["candidate"].details.get("provenance") or {}
    return _corrector_fields(provenance.get("corrector"))


def stage_gtr_evaluate(
    cfg: GTRPipelineConfig, checkpoint_uri: str, *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """Evaluate the trained policy (:func:`odyssey_core.stages.evaluate_stage`); returns
    ``scores_uri``, ``report_uri``, the summary numbers (``success_rate``, ``success_se``,
    ``mean_return``, ``return_se``, collapse metrics; NaN as None) and which corrector trained
    the model."""
    params = _eval_inputs(cfg)
    return evaluate_stage(
        cfg,
        RECIPES.get("gtr"),
        {"candidate": checkpoint_uri},
        stage=Stage("evaluate", label="gtr-evaluate"),
        extra=_trained_with,
        config=[params],
        params=params,
        parent_run_id=parent_run_id,
    )


# -- register + promotion gate ------------------------------------------------------------------


def gate_sample(scores: Mapping[str, Any], metric: str) -> list[float]:
    """The per-episode sample of ``promotion.metric`` (``return`` or ``success``) in an
    evaluation's scores."""
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
    for the first model, the base model (:func:`odyssey_core.stages.register_stage`). Returns
    the version, the decision and its reason."""
    settings = _train_settings(cfg)
    corrector = _corrector_of(settings)
    return register_stage(
        cfg,
        RECIPES.get("gtr"),
        checkpoint_uri,
        evaluation,
        base_model,
        stage=Stage("register", label="gtr-register"),
        score_keys=_SUMMARY_KEYS,
        reference_keys=("success_rate", "mean_return"),
        metric=cfg.promotion.metric,
        tags={
            "odyssey.eval_seed": str(cfg.eval.seed),
            "odyssey.corrector": corrector["name"],
            "odyssey.corrector_oracle": str(corrector["oracle"]).lower(),
            "odyssey.sft_init": str(cfg.sft.enabled).lower(),
        },
        serving=_serving(settings),
        config=[_eval_inputs(cfg)],
        parent_run_id=parent_run_id,
    )


# -- nightly ------------------------------------------------------------------------------------


#: evaluate the champion of ``cfg.game`` (and the candidate, if any) on the configured deals:
#: the mean ``promotion.metric`` (``mean_return`` or ``success_rate``) against the one recorded
#: on the champion's version, the success rate logged beside it
nightly_evaluate = nightly_evaluator(
    "gtr", lambda cfg: GTR_SCORE_KEYS[cfg.promotion.metric], series=("success_rate",)
)

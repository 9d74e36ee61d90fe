"""The ESPO training pipeline as plain functions: data -> sft -> train -> evaluate -> register.

Each stage runs in the envelope of :func:`odyssey_core.stages.run_stage`, like the other
recipes' pipelines: it works in ``<run_dir>/<stage>/``, publishes its outputs under
``runs/<run_id>/<stage>/``, logs a nested MLflow stage run, returns small dicts of URIs and
numbers, and writes ``done.json`` last, so a rerun with the same inputs skips the work.

* ``data``: the training preset's ``data`` section: a given folder (generated earlier or loaded
  SmartSpot records), or the seeded generator's preset; published as the dataset every later
  stage reads.
* ``sft`` (the cold start; ``sft.enabled``): one example per demonstrated training step
  (:mod:`~odyssey_core.recipes.espo.sft_data`), :func:`sft_epochs` epochs of
  :class:`odyssey_core.sft.trainer.SFTTrainer` on the base model with the ESPO system prompt.
* ``train`` (``train.enabled``; off for the SFT-only variants):
  :func:`~odyssey_core.recipes.espo.train.build_trainer` from the SFT model, resumable.
* ``evaluate``: offline (teacher-forced) EleAcc / Op F1 / Step SR / RecAcc on the test split
  with bootstrap and Wilson intervals, online episode success, the trivial baselines; the
  report and per-episode scores are published.
* ``register``: :func:`odyssey_core.stages.register_stage` (``evaluate`` and the nightly run
  are the generic stages too, over :func:`evaluate_model`) on the per-episode
  ``promotion.metric`` against the champion re-evaluated on the same episodes (or the base
  model for the first version). The registered name carries the channel set.

Imports no Prefect (``flows/espo.py`` and ``tasks/espo.py`` wrap it).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from odyssey_core.config import config_dir, deep_merge, read_preset
from odyssey_core.envs.persona.dataset import read_dataset, read_manifest
from odyssey_core.eval.report import plot_training_curves
from odyssey_core.policy.base import GenerationParams
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.recipe import RECIPES, Evaluation
from odyssey_core.recipes.espo.data import resolve_dataset
from odyssey_core.recipes.espo.evaluation import (
    best_achievable_rec_acc,
    evaluate_offline,
    evaluate_online,
)
from odyssey_core.recipes.espo.metrics import (
    evaluate_outcomes,
    metrics_table_markdown,
    step_scores,
    trivial_baselines,
)
from odyssey_core.recipes.espo.prompts import ESPO_SYSTEM_PROMPT
from odyssey_core.recipes.espo.report import plot_metrics, write_online_video
from odyssey_core.recipes.espo.settings import EspoSettings, load_espo_settings
from odyssey_core.recipes.espo.sft_data import SFT_GAME, build_sft_dataset
from odyssey_core.stages import (
    PIPELINE_SFT_DEFAULTS,
    PipelineSection,
    PromotionStage,
    RowsEvaluator,
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
    register_stage,
    run_stage,
    serving_fields,
    sft_settings_for,
    train_servable_model,
)

__all__ = [
    "ESPO_SFT_DEFAULTS",
    "ESPO_STAGES",
    "EspoPipelineConfig",
    "evaluate_espo_model",
    "evaluate_model",
    "load_espo_pipeline_config",
    "nightly_evaluate",
    "pipeline_dataset",
    "sft_epochs",
    "stage_espo_data",
    "stage_espo_evaluate",
    "stage_espo_register",
    "stage_espo_sft",
    "stage_espo_train",
    "sweep_overlays",
    "variant_overlay",
]

ESPO_STAGES = ("data", "sft", "train", "evaluate", "register")
#: where the pipeline presets live under ``configs/``
PIPELINE_DIR = "espo/pipeline"
log = logging.getLogger(__name__)

# The cold start's SFTSettings under ``sft.settings``: the paper gives one epoch and nothing
# else; full fine-tuning at 1e-5 with a cosine schedule is our choice for a 3B model.
ESPO_SFT_DEFAULTS: dict[str, Any] = {
    **PIPELINE_SFT_DEFAULTS,
    "batch_size": 16,
    "grad_accum_steps": 4,
    "lr": 1e-5,
}
#: the training metrics the report plots against the step
ESPO_CURVE_KEYS = (
    "espo/search_accuracy",
    "espo/recommend_accuracy",
    "espo/intent_acc",
    "espo/format_valid",
)
#: the evaluation numbers a registered version carries (``metric.eval.<key>`` tags)
ESPO_SCORE_KEYS = ("ele_acc", "op_f1", "step_sr", "rec_acc", "intent_f1", "format_valid")


class EspoSFTStage(SFTStageSection):
    sft_defaults: ClassVar[Mapping[str, Any]] = ESPO_SFT_DEFAULTS

    enabled: bool = Field(default=True, description="false: the no-SFT-cold-start variant")
    epochs: int = Field(default=1, ge=1, description="the cold start's epochs (paper: one)")
    add_rl_epochs: bool = Field(
        default=False,
        description="the all-SFT variant: SFT runs `epochs` plus the training preset's epochs "
        "(the iterations of SFT + ESPO, paper Fig. 2), with no RL stage",
    )
    skip_detours: bool = Field(
        default=False, description="leave the demonstrations' detour steps out of SFT"
    )


class EspoTrainStage(StagePreset):
    """The ESPO stage: a preset under ``configs/espo/`` (or a YAML path) and overrides."""

    enabled: bool = Field(default=True, description="false: the SFT-only variants")


class EspoEvalStage(PipelineSection):
    splits: list[Literal["train", "val", "test"]] = Field(
        default_factory=lambda: ["test"],
        description="the splits evaluated (the tiny preset's test split has one episode)",
    )
    n_envs: int = Field(default=4, ge=1, description="episodes answered side by side")
    online: bool = Field(default=True, description="also play each test episode live")
    online_max_steps: int = Field(default=40, ge=1)
    videos: int = Field(default=2, ge=0, description="live episodes shown on video")
    threshold: float = Field(default=0.5, gt=0, le=1, description="text F1 a step needs")
    resamples: int = Field(default=2000, ge=100, description="episode-bootstrap resamples")
    seed: int = 0
    generation: dict[str, Any] = Field(
        default_factory=lambda: {"temperature": 0.0},
        description="laid over the training generation params (greedy by default)",
    )


class EspoPromotionStage(PromotionStage):
    metric: Literal["step_sr", "rec_acc", "ele_acc"] = Field(
        default="step_sr", description="the per-episode score the gate compares"
    )


class EspoPipelineConfig(RunConfig):
    """One ESPO pipeline run (``configs/espo/pipeline/*.yaml``)."""

    preset_dir: ClassVar[str] = PIPELINE_DIR
    preset_what: ClassVar[str] = "ESPO pipeline"
    preset_moved_from: ClassVar[str | None] = "espo_pipeline"

    name: str = "espo-tiny"
    game: str = Field(default="espo-all", description="registered model <prefix>-<game>")
    run_dir: Path = Path("out/espo/tiny")
    experiment: str = "odyssey/train_espo"
    sft: EspoSFTStage = EspoSFTStage()
    train: EspoTrainStage = EspoTrainStage()
    eval: EspoEvalStage = EspoEvalStage()
    promotion: EspoPromotionStage = EspoPromotionStage()


#: the paper's variants: overlays under ``configs/espo/pipeline/variants/``
VARIANTS_DIR = f"{PIPELINE_DIR}/variants"


def variant_overlay(variant: str) -> dict[str, Any]:
    """The overlay of a paper variant (``sft_only``, ``all_sft``, ``vanilla_grpo``, ``espo``,
    ``no_cout``, ``no_sft``, ``no_all``, ``no_phi``, ``no_psi``)."""
    folder = config_dir() / VARIANTS_DIR
    path = folder / f"{variant}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
        raise FileNotFoundError(f"unknown ESPO variant {variant!r}; variants: {known}")
    return read_preset(path) or {}


def sweep_overlays(sweep: str = "epochs_k") -> dict[str, dict[str, Any]]:
    """The cells of a sweep under ``configs/espo/pipeline/sweeps/`` (paper Fig. 6: epochs x k),
    each as a name and an overlay of the training preset."""
    path = config_dir() / PIPELINE_DIR / "sweeps" / f"{sweep}.yaml"
    grid = read_preset(path)
    return {
        f"epochs{e}-k{k:g}": {"train": {"overrides": {"epochs": e, "advantage": {"k": k}}}}
        for e in grid["epochs"]
        for k in grid["k"]
    }


def load_espo_pipeline_config(
    preset: str | Path = "tiny",
    overrides: Mapping[str, Any] | None = None,
    *,
    variant: str | None = None,
) -> EspoPipelineConfig:
    """A preset name under ``configs/espo/pipeline/`` or a YAML path, a paper ``variant`` laid
    over it, then nested overrides."""
    layers = deep_merge(variant_overlay(variant) if variant else {}, dict(overrides or {}))
    return EspoPipelineConfig.load(preset, layers)


def _train_settings(cfg: EspoPipelineConfig, **more: Any) -> EspoSettings:
    return load_espo_settings(cfg.train.preset, deep_merge(cfg.train.overrides, more))


# -- data -----------------------------------------------------------------------------------------


def stage_espo_data(cfg: EspoPipelineConfig, *, parent_run_id: str | None = None) -> dict[str, Any]:
    """The demonstrations: returns ``dataset_uri`` and the episode counts per split."""
    data = _train_settings(cfg).data

    def body(ctx: StageContext) -> dict[str, Any]:
        folder = resolve_dataset(data, ctx.work / f"data-{ctx.tag}")
        manifest = read_manifest(folder)
        counts = {s: int(manifest["splits"][s]) for s in ("train", "val", "test")}
        ctx.run.log_metrics({f"episodes_{s}": float(n) for s, n in counts.items()})
        uri = ctx.publish_dir(folder, f"dataset-{ctx.tag}", ref="dataset")
        ctx.keep(folder)
        return {
            "dataset_uri": uri,
            "dataset_path": str(folder),
            "content_hash": manifest.get("content_hash"),
            **{f"episodes_{s}": n for s, n in counts.items()},
        }

    return run_stage(
        cfg,
        Stage("data", label="espo-data"),
        body,
        config=[data.model_dump(mode="json")],
        params=data,
        parent_run_id=parent_run_id,
    )


def _dataset(cfg: EspoPipelineConfig, data: Mapping[str, Any], work: Path) -> Path:
    path = Path(str(data.get("dataset_path", "")))
    if (path / "episodes.jsonl").is_file():
        return path
    return local_copy(cfg, data["dataset_uri"], work, "dataset")


def pipeline_dataset(cfg: EspoPipelineConfig, work: Path) -> Path:
    """The pipeline's demonstrations as a local folder: the data stage's (run now unless its
    marker says it is done), fetched under ``work`` when another worker made them."""
    return _dataset(cfg, stage_espo_data(cfg), work)


# -- sft ------------------------------------------------------------------------------------------


def sft_epochs(cfg: EspoPipelineConfig) -> int:
    """The SFT stage's epochs: ``sft.epochs``, plus the training preset's (ESPO) epochs with
    ``sft.add_rl_epochs`` (all SFT)."""
    if not cfg.sft.add_rl_epochs:
        return cfg.sft.epochs
    return cfg.sft.epochs + _train_settings(cfg).epochs


def espo_sft_settings(cfg: EspoPipelineConfig) -> Any:
    """ESPO_SFT_DEFAULTS, then the training preset's model (dtype, device, frame size), then
    :func:`sft_epochs` and ``sft.settings``."""
    defaults = {**ESPO_SFT_DEFAULTS, "epochs": sft_epochs(cfg)}
    return sft_settings_for(_train_settings(cfg).model, defaults, cfg.sft.settings)


def stage_espo_sft(
    cfg: EspoPipelineConfig, data: Mapping[str, Any], *, parent_run_id: str | None = None
) -> dict[str, Any]:
    """The cold start: returns ``model_uri`` (the SFT model), ``base_model_uri``, counts."""
    settings = _train_settings(cfg)
    sft_settings = espo_sft_settings(cfg)

    def body(ctx: StageContext) -> dict[str, Any]:
        dataset = _dataset(cfg, data, ctx.work)
        examples = ctx.work / f"sft-data-{ctx.tag}"
        episodes = read_dataset(dataset, split="train")
        if settings.data.channel is not None:
            episodes = [e for e in episodes if e.channel == settings.data.channel]
        if not (examples / "manifest.json").is_file():
            shutil.rmtree(examples, ignore_errors=True)
            built = build_sft_dataset(
                dataset,
                episodes,
                examples,
                skip_detours=cfg.sft.skip_detours,
                history_window=settings.rollout.history_window,
            )
            ctx.run.log_metrics({"sft_examples": float(built.samples)})
        tuned = fine_tune_base_model(
            ctx, settings, sft_settings, examples, system_prompts={SFT_GAME: ESPO_SYSTEM_PROMPT}
        )
        samples = json.loads((examples / "manifest.json").read_text())["num_samples"]
        return {
            "model_uri": tuned.model_uri,
            "base_model_uri": tuned.base_model_uri,
            "samples": int(samples),
            "steps": tuned.result.steps,
            "epochs": sft_settings.epochs,
        }

    return run_stage(
        cfg,
        Stage("sft", label="espo-sft"),
        body,
        config=[
            cfg.sft.model_dump(mode="json"),
            sft_settings.model_dump(mode="json"),
            settings.model.model_dump(mode="json"),
            settings.data.channel,
            settings.rollout.history_window,
        ],
        inputs={"dataset": data["dataset_uri"]},
        params=sft_settings,
        parent_run_id=parent_run_id,
    )


# -- train ----------------------------------------------------------------------------------------


def stage_espo_train(
    cfg: EspoPipelineConfig,
    data: Mapping[str, Any],
    sft: Mapping[str, Any] | None,
    *,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """ESPO (or its GRPO variant) from the SFT model: returns ``checkpoint_uri`` and
    ``base_model``; without a train stage (SFT only) the SFT model is the checkpoint."""
    from odyssey_core.recipes.espo.train import build_trainer

    settings = _train_settings(cfg)

    def body(ctx: StageContext) -> dict[str, Any]:
        dataset = _dataset(cfg, data, ctx.work)
        more: dict[str, Any] = {"data": {"dataset": str(dataset)}}
        if sft is not None:
            more["model"] = {"path": str(ctx.fetch("sft_model", ctx.work / f"sft-{ctx.tag}"))}
        run_settings = _train_settings(cfg, **more)

        trained = train_servable_model(
            ctx,
            "espo",
            run_settings,
            build_trainer,
            system_prompt=ESPO_SYSTEM_PROMPT,
            sft_base_model=None if sft is None else sft["base_model_uri"],
        )
        uri = ctx.publish_dir(trained.model_dir, f"checkpoint-{ctx.tag}", ref="checkpoint")
        ctx.keep(trained.checkpoint)
        return {
            "checkpoint_uri": uri,
            "base_model": trained.base_model,
            "steps": trained.steps,
            "mlflow_run_id": ctx.run.run_id,  # its metrics are the report's training curves
        }

    inputs = {"dataset": data["dataset_uri"]}
    if sft is not None:
        inputs["sft_model"] = sft["model_uri"]
    return run_stage(
        cfg,
        Stage("train", label="espo-train"),
        body,
        config=[settings.model_dump(mode="json")],
        inputs=inputs,
        params=settings,
        parent_run_id=parent_run_id,
    )


# -- evaluate -------------------------------------------------------------------------------------


def _eval_inputs(cfg: EspoPipelineConfig) -> dict[str, Any]:
    s = _train_settings(cfg)
    return {
        "eval": cfg.eval.model_dump(mode="json"),
        **eval_model_inputs(s, cfg.eval.generation),
        "channel": s.data.channel,
        "history_window": s.rollout.history_window,
    }


def _per_episode(outcomes: list[Any], episodes: list[Any], metric: str, threshold: float):
    """The gate's sample: ``metric`` averaged over each episode's steps that count for it."""
    intent = {e.episode_id: e.intent for e in episodes}
    sums: dict[str, list[float]] = {e.episode_id: [] for e in episodes}
    for outcome in outcomes:
        score = step_scores(outcome, intent[outcome.episode_id], threshold).get(metric)
        if score is not None:
            sums[outcome.episode_id].append(float(score))
    return {k: (sum(v) / len(v) if v else 0.0) for k, v in sums.items()}


def evaluate_espo_model(
    cfg: EspoPipelineConfig,
    model_ref: str,
    label: str,
    dataset: Path,
    out_dir: Path,
    *,
    training_run_id: str | None = None,
) -> dict[str, Any]:
    """Evaluate one model (store URI or folder) on ``eval.splits``: the metrics with their
    intervals, the trivial baselines, per-episode scores, and the report folder (the table,
    the best achievable RecAcc on these episodes under it, the bar plot, videos of the first
    ``eval.videos`` live episodes with the model's reasoning, and the training curves of
    ``training_run_id`` when given), no marker."""
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = _eval_inputs(cfg)
    s = _train_settings(cfg)
    e = cfg.eval
    model = local_copy(cfg, model_ref, out_dir, "fetched")
    policy = HFPolicy.for_evaluation(
        model,
        ESPO_SYSTEM_PROMPT,
        image_size=s.model.image_size,
        image_scale=s.model.image_scale,
        dtype=s.model.dtype,
        device=s.model.device,
    )
    generation = GenerationParams.model_validate(inputs["generation"])
    episodes, outcomes, online = [], [], []
    for split in e.splits:  # an env holds one split
        chosen = [
            x
            for x in read_dataset(dataset, split=split)
            if s.data.channel is None or x.channel == s.data.channel
        ]
        if not chosen:
            continue
        common = {
            "split": split,
            "generation": generation,
            "n_envs": e.n_envs,
            "seed": e.seed,
            "channel": s.data.channel,
            "history_window": s.rollout.history_window,
        }
        episodes += chosen
        outcomes += evaluate_offline(policy, dataset, chosen, **common)
        if e.online:
            online += evaluate_online(
                policy,
                dataset,
                chosen,
                max_steps=e.online_max_steps,
                record=max(0, e.videos - len(online)),
                **common,
            )
    if not episodes:
        raise ValueError(f"{dataset} has no episodes in the evaluation splits {e.splits}")
    metrics = evaluate_outcomes(
        outcomes,
        episodes=episodes,
        online_success=[r.success for r in online] or None,
        threshold=e.threshold,
        seed=e.seed,
        resamples=e.resamples,
    )
    baselines = trivial_baselines(episodes, seed=e.seed, resamples=e.resamples)
    per_episode = _per_episode(outcomes, episodes, cfg.promotion.metric, e.threshold)
    summary = {k.removeprefix("espo/"): v for k, v in metrics.as_dict().items()}
    scores = {
        "label": label,
        "model": model_ref,
        "metric": cfg.promotion.metric,
        "episodes": list(per_episode),
        "scores": list(per_episode.values()),
        "online": [
            {"episode": r.episode_id, "success": r.success, "turns": r.turns, "error": r.error}
            for r in online
        ],
    }
    (out_dir / "scores.json").write_text(json.dumps(scores))
    folder = out_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    pictures = [plot_metrics({label: metrics}, baselines, folder / "metrics.png")]
    for k, result in enumerate(r for r in online if r.frames):
        video = write_online_video(result, folder / f"live-{k}.mp4")
        pictures += [video] if video is not None else []
    if training_run_id is not None:
        curves = plot_training_curves(
            cfg.mlflow_uri, training_run_id, folder / "training.png", ESPO_CURVE_KEYS
        )
        pictures += [curves] if curves is not None else []
    report = folder / "report.md"
    report.write_text(
        f"### ESPO evaluation: {label}\n\n"
        f"{len(episodes)} {'+'.join(e.splits)} episodes, {metrics.n_steps} steps, "
        f"teacher-forced (intervals: episode bootstrap, {metrics.confidence:.0%}); online "
        f"success over {len(online)} live episodes.\n\n"
        + metrics_table_markdown({label: metrics}, baselines)
        + f"\n\n{best_achievable_rec_acc(episodes).line()}\n\n"
        + "".join(
            f"![{p.stem}]({p.name})\n" if p.suffix == ".png" else f"[{p.name}]({p.name})\n"
            for p in pictures
        )
    )
    return {
        "summary": summary,
        "scores": scores,
        "scores_path": str(out_dir / "scores.json"),
        "report_dir": str(folder),
        "report_markdown": str(report),
    }


def _evaluation(evaluated: Mapping[str, Any]) -> Evaluation:
    """An :func:`evaluate_espo_model` result as the recipe's :class:`Evaluation`: the gate's
    sample is the per-episode ``promotion.metric``."""
    return Evaluation(
        scores=[float(x) for x in evaluated["scores"]["scores"]],
        summary={
            k: float(v)
            for k, v in evaluated["summary"].items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        },
        report=Path(evaluated["report_markdown"]),
        details=dict(evaluated),
    )


def evaluate_model(
    cfg: EspoPipelineConfig, model_ref: str, label: str, out_dir: Path
) -> Evaluation:
    """The recipe's evaluation of one model: the pipeline's evaluation splits, teacher-forced
    and live (:func:`evaluate_espo_model` on :func:`pipeline_dataset`)."""
    dataset = pipeline_dataset(cfg, out_dir)
    return _evaluation(evaluate_espo_model(cfg, model_ref, label, dataset, out_dir))


def _rows_on(
    cfg: EspoPipelineConfig, data: Mapping[str, Any], training_run_id: str | None
) -> RowsEvaluator:
    """The rows on the data stage's demonstrations; the candidate's report also plots the
    curves of ``training_run_id``."""

    def evaluate(models: Mapping[str, str], out_dir: Path) -> dict[str, Evaluation]:
        dataset = _dataset(cfg, data, out_dir)
        return {
            label: _evaluation(
                evaluate_espo_model(
                    cfg,
                    ref,
                    label,
                    dataset,
                    out_dir / label,
                    training_run_id=training_run_id if label == "candidate" else None,
                )
            )
            for label, ref in models.items()
        }

    return evaluate


def stage_espo_evaluate(
    cfg: EspoPipelineConfig,
    data: Mapping[str, Any],
    checkpoint_uri: str,
    *,
    training_run_id: str | None = None,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Evaluate the trained policy (:func:`odyssey_core.stages.evaluate_stage`); returns
    ``scores_uri``, ``report_uri`` (the report folder: table, plot, videos, the curves of
    ``training_run_id``) and the metrics."""
    params = _eval_inputs(cfg)
    return evaluate_stage(
        cfg,
        RECIPES.get("espo"),
        {"candidate": checkpoint_uri},
        stage=Stage("evaluate", label="espo-evaluate"),
        evaluate_rows=_rows_on(cfg, data, training_run_id),
        summary_keys=(*ESPO_SCORE_KEYS, "online_success"),
        config=[params],
        inputs={"dataset": data["dataset_uri"]},
        params=params,
        parent_run_id=parent_run_id,
    )


# -- register + promotion gate --------------------------------------------------------------------


def _serving(cfg: EspoPipelineConfig) -> dict[str, Any]:
    s = _train_settings(cfg)
    return serving_fields(s.model, s.rollout.generation.max_new_tokens)


def stage_espo_register(
    cfg: EspoPipelineConfig,
    data: Mapping[str, Any],
    checkpoint_uri: str,
    evaluation: Mapping[str, Any],
    base_model: str,
    *,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Register the checkpoint as ``candidate`` and gate it on the per-episode
    ``promotion.metric`` against the champion (or the base model), on the same episodes
    (:func:`odyssey_core.stages.register_stage`)."""
    return register_stage(
        cfg,
        RECIPES.get("espo"),
        checkpoint_uri,
        evaluation,
        base_model,
        stage=Stage("register", label="espo-register"),
        score_keys=ESPO_SCORE_KEYS,
        metric=cfg.promotion.metric,
        tags={
            "odyssey.sft_init": str(cfg.sft.enabled).lower(),
            "odyssey.espo_stage": str(cfg.train.enabled).lower(),
            "odyssey.dataset_hash": str(data.get("content_hash")),
        },
        serving=_serving(cfg),
        config=[_eval_inputs(cfg)],
        inputs={"dataset": data["dataset_uri"]},
        parent_run_id=parent_run_id,
    )


# -- nightly --------------------------------------------------------------------------------------


#: re-evaluate the champion of ``cfg.game`` (and the candidate) on the pipeline's dataset and
#: compare the champion's ``promotion.metric`` with the one recorded on its version
nightly_evaluate = nightly_evaluator("espo", lambda cfg: cfg.promotion.metric)

"""The configuration of an ESPO run, loaded from ``configs/espo/``.

The paper (Section 5.1) gives: Qwen2.5-VL-3B, one epoch of SFT, then six epochs of ESPO
implemented with EasyR1, one episode per batch, k = 1 and w = 1. Everything else it leaves
open is EasyR1's default (``examples/config.yaml`` and the actor config): G = 5 samples per
prompt at temperature 1.0 and top-p 0.99, lr 1e-6 with weight decay 1e-2, clip 0.2 / 0.3, a
k3 ("low_var_kl") KL to the reference at 1e-2, gradient clip 1.0, one PPO epoch per batch.

A preset may start with ``inherit: other.yaml``; the variants in ``configs/espo/variants/`` are
overlays. Unknown keys are errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from odyssey_core.config import StrictModel, load_preset
from odyssey_core.launch import LaunchSettings
from odyssey_core.models.lora import LoraSettings
from odyssey_core.policy.base import GenerationParams
from odyssey_core.policy.weight_sync import RolloutBackendSettings
from odyssey_core.recipes.espo.advantages import Accumulation, Combine, StdKind
from odyssey_core.recipes.espo.rewards import StageRewardSettings
from odyssey_core.rl.settings import ModelSettings

__all__ = [
    "EspoAdvantageSection",
    "EspoDataSettings",
    "EspoGRPOSettings",
    "EspoRolloutSettings",
    "EspoSettings",
    "load_espo_settings",
]


class EspoDataSettings(StrictModel):
    """Where the demonstrations come from: a dataset folder, or the seeded generator."""

    dataset: Path | None = Field(
        default=None,
        description="a folder with episodes.jsonl (generated, or loaded SmartSpot records); "
        "null: generate `preset` with `seed` into the run folder",
    )
    preset: Literal["tiny", "smartspot_like"] = Field(
        default="tiny", description="the generator preset when dataset is null"
    )
    seed: int = Field(default=0, ge=0, description="the generator's seed")
    drop_channel: str | None = Field(
        default=None,
        description="a channel left out before the 8:1:1 split (drop travel from smartspot_like "
        "to get the paper's 102 episodes)",
    )
    channel: str | None = Field(
        default=None, description="train and evaluate on one channel only (e.g. hotel)"
    )


class EspoRolloutSettings(StrictModel):
    """Teacher-forced sampling: every step prompt of a demonstrated episode, G times."""

    samples_per_step: int = Field(
        default=5, ge=1, description="G: EasyR1's rollout.n (the paper does not give it)"
    )
    episodes_per_step: int = Field(
        default=1,
        ge=1,
        description="demonstrated episodes per training step (the paper: one episode per batch)",
    )
    generation: GenerationParams = Field(
        default=GenerationParams(temperature=1.0, top_p=0.99, max_new_tokens=160),
        description="EasyR1's rollout sampling: temperature 1.0, top-p 0.99",
    )
    score_micro_batch: int = Field(default=4, ge=1, description="turns per scoring forward")
    history_window: int | None = Field(
        default=None,
        ge=0,
        description="how many of the previous actions the turn text lists (null: all, as the "
        "paper's prompt)",
    )
    rewards: StageRewardSettings = StageRewardSettings()
    backend: RolloutBackendSettings = Field(
        default=RolloutBackendSettings(),
        description="the engine that samples: hf (the trainer's model), vllm (in-process, "
        "colocated) or openai (a server: odyssey serve or vLLM); weights synced every update",
    )


class EspoAdvantageSection(StrictModel):
    """How step rewards and the chain-of-user-thought reward become advantages: the
    estimator's name and :class:`~odyssey_core.recipes.espo.advantages.EspoAdvantageSettings`'s
    fields (eps keeps its default)."""

    estimator: Literal["espo", "grpo_step"] = Field(
        default="espo", description="espo: A_step + w * A_COUT; grpo_step: vanilla step GRPO"
    )
    k: float = Field(default=1.0, gt=0, description="the gates' temperature (paper: 1.0)")
    w: float = Field(default=1.0, ge=0, description="the COUT advantage weight (paper: 1.0)")
    accumulation: Accumulation = Field(
        default="signed",
        description="how a stage's step accuracies add up to S_gui / S_rec (see "
        "recipes/espo/advantages.py: signed is the only reading whose gate can close at k=1)",
    )
    combine: Combine = Field(
        default="broadcast",
        description="broadcast: A_step + w * A_COUT; reward_sum: r + w * R_COUT, then "
        "group-relative per step",
    )
    use_phi: bool = Field(default=True, description="false: the no-phi ablation")
    use_psi: bool = Field(default=True, description="false: the no-psi ablation")
    std: StdKind = Field(
        default="sample", description="group-relative normalisation (EasyR1: sample std)"
    )


class EspoGRPOSettings(StrictModel):
    """GRPO's clipped surrogate with a k3 KL to the reference model (EasyR1's defaults)."""

    clip_low: float = Field(default=0.2, gt=0, lt=1, description="EasyR1: clip_ratio_low 0.2")
    clip_high: float = Field(default=0.3, gt=0, description="EasyR1: clip_ratio_high 0.3")
    kl_coef: float = Field(default=1e-2, ge=0, description="EasyR1: low_var_kl (k3), 1e-2")
    lr: float = Field(default=1e-6, gt=0, description="EasyR1: 1e-6")
    weight_decay: float = Field(default=1e-2, ge=0, description="EasyR1: 1e-2")
    grad_clip: float = Field(default=1.0, gt=0, description="EasyR1: max_grad_norm 1.0")
    ppo_epochs: int = Field(default=1, ge=1, description="EasyR1: ppo_epochs 1")
    sampler: Literal["episodes", "shuffled_turns"] = Field(
        default="episodes",
        description="episodes: ESPO's episodic batch sampler (whole episodes, time order kept, "
        "episodes shuffled); shuffled_turns: vanilla GRPO's shuffled steps",
    )
    minibatch_size: int = Field(
        default=1,
        ge=1,
        description="per optimiser step, in the sampler's unit: episodes (paper: one) or turns",
    )


class EspoSettings(StrictModel):
    """Everything one ESPO run needs. Training steps = ``epochs`` x ceil(training episodes /
    ``rollout.episodes_per_step``), or ``steps`` when set."""

    seed: int = 0
    epochs: int = Field(default=6, ge=1, description="passes over the training episodes (six)")
    steps: int | None = Field(
        default=None,
        ge=1,
        description="stop after this many training steps (null: epochs x steps per epoch)",
    )
    checkpoint_every: int = Field(default=10, ge=1)
    model: ModelSettings = ModelSettings()
    lora: LoraSettings | None = Field(
        default=None, description="null: full fine-tuning (EasyR1 trains the whole model)"
    )
    data: EspoDataSettings = EspoDataSettings()
    rollout: EspoRolloutSettings = EspoRolloutSettings()
    advantage: EspoAdvantageSection = EspoAdvantageSection()
    grpo: EspoGRPOSettings = EspoGRPOSettings()
    deepspeed: Path | None = Field(default=None, description="a ZeRO JSON, or null")
    launch: LaunchSettings = Field(
        default=LaunchSettings(),
        description="processes and launcher of the pipeline's training stage (1: in-process)",
    )


def load_espo_settings(preset: str | Path, overrides: dict[str, Any] | None = None) -> EspoSettings:
    """A preset under ``configs/espo/`` or a YAML path (following ``inherit:``), with nested
    ``overrides``."""
    return load_preset(EspoSettings, preset, overrides, kind="espo", what="ESPO")

"""The configuration of an ESPO run, loaded from ``configs/espo/``.

The paper (Section 5.1) gives: Qwen2.5-VL-3B, one epoch of SFT, then six epochs of ESPO
implemented with EasyR1, one episode per batch, k = 1 and w = 1. Everything else it leaves
open is EasyR1's default (``examples/config.yaml`` and the actor config): G = 5 samples per
prompt at temperature 1.0 and top-p 0.99, lr 1e-6 with weight decay 1e-2, clip 0.2 / 0.3 with
dual clip 3.0, a k3 ("low_var_kl") KL to the reference at 1e-2, gradient clip 1.0, one PPO epoch
per batch.

A preset may start with ``inherit: other.yaml``; the paper's variants
(``configs/espo/pipeline/variants/``) are overlays. Unknown keys are errors; a renamed key
fails with its new name (:attr:`EspoSettings.renamed_keys`). The sections every recipe shares
(``rollout``, ``advantage``, ``ppo``, ``launch``, ...) are
:class:`~odyssey_core.rl.train_settings.TrainSettings`'s; the ``advantage:`` section is
:class:`~odyssey_core.recipes.espo.advantages.EspoAdvantageSettings`, what the estimators read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from odyssey_core.config import StrictModel, load_preset, redefault
from odyssey_core.policy.base import GenerationParams
from odyssey_core.recipes.espo.advantages import EspoAdvantageSettings
from odyssey_core.recipes.espo.rewards import StageRewardSettings
from odyssey_core.rl.train_settings import PPOSettings, RolloutSettings, TrainSettings

__all__ = [
    "EspoDataSettings",
    "EspoPPOSettings",
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
        description="a channel left out before the 8:1:1 split (beside exclude_channels)",
    )
    exclude_channels: list[str] = Field(
        default_factory=list,
        description="channels left out before the 8:1:1 split (smartspot_like without medicine: "
        "the paper's 102 episodes, 1,709 steps against its 1,713)",
    )
    channel: str | None = Field(
        default=None, description="train and evaluate on one channel only (e.g. hotel)"
    )


class EspoRolloutSettings(RolloutSettings):
    """Teacher-forced sampling: every step prompt of a demonstrated episode, G times."""

    samples_per_step: int = Field(
        default=5, ge=1, description="G: EasyR1's rollout.n (the paper does not give it)"
    )
    episodes_per_step: int = Field(
        default=1,
        ge=1,
        description="demonstrated episodes per training step (one rollout batch); the paper's "
        "'one episode per batch' is the sampler's minibatch (ppo.minibatch_size: 1)",
    )
    generation: GenerationParams = redefault(
        RolloutSettings,
        "generation",
        GenerationParams(temperature=1.0, top_p=0.99, max_new_tokens=160),
        "EasyR1's rollout sampling: temperature 1.0, top-p 0.99",
    )
    history_window: int | None = Field(
        default=None,
        ge=0,
        description="how many of the previous actions the turn text lists (null: all, as the "
        "paper's prompt)",
    )
    rewards: StageRewardSettings = StageRewardSettings()


class EspoPPOSettings(PPOSettings):
    """GRPO's clipped surrogate with a k3 KL to the reference model (EasyR1's defaults)."""

    clip_low: float = redefault(PPOSettings, "clip_low", 0.2, "EasyR1: clip_ratio_low 0.2")
    clip_high: float = redefault(PPOSettings, "clip_high", 0.3, "EasyR1: clip_ratio_high 0.3")
    kl_coef: float = Field(default=1e-2, ge=0, description="EasyR1: low_var_kl (k3), 1e-2")
    lr: float = redefault(PPOSettings, "lr", 1e-6, "EasyR1: 1e-6")
    weight_decay: float = redefault(PPOSettings, "weight_decay", 1e-2, "EasyR1: 1e-2")
    grad_clip: float = redefault(PPOSettings, "grad_clip", 1.0, "EasyR1: max_grad_norm 1.0")
    epochs: int = redefault(PPOSettings, "epochs", 1, "EasyR1: ppo_epochs 1")
    sampler: Literal["episodes", "shuffled_turns", "shuffled_turns_equal_steps"] = Field(
        default="episodes",
        description="episodes: ESPO's episodic batch sampler (whole episodes, time order kept, "
        "episodes shuffled); shuffled_turns_equal_steps: vanilla GRPO, the batch's steps "
        "shuffled across episodes into as many minibatches as `episodes` makes; "
        "shuffled_turns: shuffled steps in chunks of minibatch_size turns",
    )
    dual_clip: float | None = Field(
        default=None,
        gt=1,
        description="dual-clip PPO's c: a token with a negative advantage keeps at least c * A "
        "(null: off; the paper preset sets EasyR1's clip_ratio_dual 3.0)",
    )
    minibatch_size: int = redefault(
        PPOSettings,
        "minibatch_size",
        1,
        "per optimiser step, in the sampler's unit: episodes (paper: one) or turns",
    )


class EspoSettings(TrainSettings):
    """Everything one ESPO run needs. Training steps = ``epochs`` x ceil(training episodes /
    ``rollout.episodes_per_step``), or ``steps`` when set."""

    renamed_keys: ClassVar[Mapping[str, str]] = {
        "grpo": "ppo",
        "grpo.ppo_epochs": "ppo.epochs",
    }

    epochs: int = Field(default=6, ge=1, description="passes over the training episodes (six)")
    steps: int | None = Field(
        default=None,
        ge=1,
        description="stop after this many training steps (null: epochs x steps per epoch)",
    )
    data: EspoDataSettings = EspoDataSettings()
    rollout: EspoRolloutSettings = EspoRolloutSettings()
    advantage: EspoAdvantageSettings = EspoAdvantageSettings()
    ppo: EspoPPOSettings = EspoPPOSettings()

    @model_validator(mode="after")
    def _shuffling_needs_several_episodes(self) -> EspoSettings:
        if self.ppo.sampler == "shuffled_turns_equal_steps" and self.rollout.episodes_per_step < 2:
            raise ValueError(
                "ppo.sampler shuffled_turns_equal_steps shuffles steps across the episodes of a "
                "batch, but rollout.episodes_per_step is 1; set it to 2 or more (the same in "
                "the ESPO run it is compared with)"
            )
        return self


def load_espo_settings(preset: str | Path, overrides: dict[str, Any] | None = None) -> EspoSettings:
    """A preset under ``configs/espo/`` or a YAML path (following ``inherit:``), with nested
    ``overrides``."""
    return load_preset(EspoSettings, preset, overrides, kind="espo", what="ESPO")

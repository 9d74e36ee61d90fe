"""The sections of a training preset that every RL recipe shares, so one knob has one name
in every recipe.

:class:`TrainSettings` is the base of every recipe's settings: ``seed``, ``checkpoint_every``,
``model``, ``lora``, ``rollout`` (:class:`RolloutSettings`: ``generation``,
``score_micro_batch``, ``backend``), ``advantage``
(:class:`~odyssey_core.rl.advantages.AdvantageSettings`: ``estimator``, ``gamma``,
``gae_lambda``, ``normalize``), ``ppo`` (:class:`PPOSettings`: ``clip_low``, ``clip_high``,
``epochs``, ``minibatch_size``, ``lr``, ``weight_decay``, ``grad_clip``, ``entropy_coef``),
``deepspeed`` and ``launch``. A recipe subclasses each section for what is its own and gives
the shared knobs its paper's values with :func:`~odyssey_core.config.redefault`, so their
bounds are declared here only.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from odyssey_core.config import StrictModel
from odyssey_core.launch import LaunchSettings
from odyssey_core.models.lora import LoraSettings
from odyssey_core.policy.base import GenerationParams
from odyssey_core.policy.weight_sync import RolloutBackendSettings
from odyssey_core.rl.advantages import AdvantageSettings
from odyssey_core.rl.settings import ModelSettings, OptimiserSettings

__all__ = ["BaseModelRequiredError", "PPOSettings", "RolloutSettings", "TrainSettings"]


class BaseModelRequiredError(ValueError):
    """A preset that requires a base model has none; the message names the setting."""


class PPOSettings(OptimiserSettings):
    """The clipped policy update and its AdamW optimiser (``ppo:``): the ratio of new to old
    probability is clipped to [1 - clip_low, 1 + clip_high]."""

    clip_low: float = Field(default=0.2, ge=0, lt=1, description="the ratio's clip below 1")
    clip_high: float = Field(default=0.2, ge=0, description="the ratio's clip above 1")
    entropy_coef: float = Field(
        default=0.0,
        ge=0,
        description="exact-entropy bonus coefficient (the entropy of the sampling "
        "distribution at every response token); 0: none",
    )


class RolloutSettings(StrictModel):
    """How a training step samples its turns: what every recipe's ``rollout:`` has."""

    generation: GenerationParams = Field(
        default=GenerationParams(), description="the sampling parameters of every answer"
    )
    score_micro_batch: int = Field(
        default=4, ge=1, description="turns per forward pass when (re)scoring log-probs"
    )
    backend: RolloutBackendSettings = Field(
        default=RolloutBackendSettings(),
        description="the engine that samples: hf (the trainer's model), vllm (in-process, "
        "colocated) or openai (a server: odyssey serve or vLLM); weights synced every update",
    )


class TrainSettings(StrictModel):
    """What every RL recipe's training preset has; a recipe's settings subclass it, narrowing
    ``rollout``, ``advantage`` and ``ppo`` to its own sections."""

    seed: int = 0
    checkpoint_every: int = Field(default=10, ge=1, description="steps between checkpoints")
    model: ModelSettings = ModelSettings()
    lora: LoraSettings | None = Field(default=None, description="null: full fine-tuning")
    rollout: RolloutSettings = RolloutSettings()
    advantage: AdvantageSettings = Field(
        description="the estimator (a name in ESTIMATORS) and what it reads"
    )
    ppo: PPOSettings = PPOSettings()
    deepspeed: Path | None = Field(
        default=None, description="a ZeRO-2 JSON for the policy update (GPU launcher), or null"
    )
    launch: LaunchSettings = Field(
        default=LaunchSettings(),
        description="processes and launcher of the pipeline's training stage (1: in-process)",
    )
    requires_base_model: bool = Field(
        default=False,
        description="true in a preset at a paper's sizes (its model, LoRA, corrector): the run "
        "refuses to start while model.path is null, which would train the tiny offline model "
        "at the paper's cost; CPU presets that inherit such a preset set it false",
    )

    def check_base_model(self, setting: str = "model.path") -> None:
        """Raise :class:`BaseModelRequiredError` when this preset requires a base model and
        ``model.path`` is null or names no folder; ``setting`` is the key the user sets (a
        pipeline: ``train.overrides.model.path``). Cheap: call it before any work."""
        if not self.requires_base_model:
            return
        path = self.model.path
        if path is None:
            raise BaseModelRequiredError(
                f"{setting} is null, but this preset runs at a paper's sizes "
                "(requires_base_model: true): set "
                f"{setting} to a local base-model checkpoint folder (nothing downloads), or "
                "use a CPU preset (tiny), or set requires_base_model: false to train the tiny "
                "offline model anyway"
            )
        if not Path(path).is_dir():
            raise BaseModelRequiredError(
                f"{setting} {str(path)!r} is not a folder: set it to a local base-model "
                "checkpoint folder (config.json and weights)"
            )

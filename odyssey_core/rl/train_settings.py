"""The configuration of a whole RL run (``odyssey train``), loaded from ``configs/odysseus/``.

A preset is a YAML mapping of the sections below. A preset may start with
``inherit: other.yaml`` (a path relative to the preset's own folder): the other file is loaded
first (recursively) and this file's keys are deep-merged on top, so the Figure 4 estimator
presets are three-line overlays on ``compare.yaml``. Unknown keys are errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from odyssey_core.config import GameBoyEnvConfig, StrictModel, load_preset
from odyssey_core.models.loading import DTypeName
from odyssey_core.models.lora import LoraSettings
from odyssey_core.policy.base import GenerationParams
from odyssey_core.rl.advantages import ESTIMATORS
from odyssey_core.rl.settings import CriticSettings, CurriculumSettings, PPOSettings

__all__ = [
    "ESTIMATORS_WITH_VALUES",
    "ModelSettings",
    "RLTrainSettings",
    "RolloutSettings",
    "load_train_settings",
]

#: estimators that read the critic's V(o_t); the others train the critic only for its metrics
ESTIMATORS_WITH_VALUES = frozenset({"ppo_critic", "ppo_critic_pos"})


class ModelSettings(StrictModel):
    """The policy checkpoint; ``path: null`` builds the tiny offline Qwen3-VL into the run."""

    path: Path | None = Field(
        default=None, description="local checkpoint folder; null: <out>/base-model (tiny)"
    )
    dtype: DTypeName = "float32"
    device: str = "cpu"
    image_scale: int | None = Field(default=None, ge=1, description="paper: 8x upsampling")
    image_size: tuple[int, int] | None = None
    attn_implementation: str = "sdpa"
    game: str = Field(default="odland", description="which system prompt the policy gets")


class RolloutSettings(StrictModel):
    """How each training step collects its batch (Table 4 / Table 9 "rollout" rows)."""

    num_trajectories: int = Field(default=128, ge=1, description="complete episodes per step")
    max_turns: int = Field(default=80, ge=1, description="Table 4: 80; Table 9: 400")
    n_envs: int = Field(default=8, ge=1, description="environments stepped in lockstep")
    vector: Literal["sync", "subproc"] = Field(
        default="sync", description="in-process envs or one worker process per env"
    )
    generation: GenerationParams = Field(
        default=GenerationParams(temperature=1.0, top_p=1.0, max_new_tokens=1024),
        description="Table 4: temperature 1, top_p 1, response length 1024",
    )
    score_micro_batch: int = Field(
        default=4, ge=1, description="turns per forward pass when (re)scoring log-probs"
    )


class RLTrainSettings(StrictModel):
    """Everything one RL run needs; each section maps onto one building block."""

    seed: int = 0
    steps: int = Field(default=100, ge=1, description="training steps (Table 9: 190)")
    checkpoint_every: int = Field(default=10, ge=1, description="steps between checkpoints")
    out_dir: Path | None = Field(default=None, description="overridden by `--out`")
    model: ModelSettings = ModelSettings()
    lora: LoraSettings | None = Field(default=None, description="null: full fine-tuning")
    env: GameBoyEnvConfig = Field(
        default=GameBoyEnvConfig(), description="turn settings shared by every level"
    )
    levels: list[str] = Field(default=["odland-1-1"], min_length=1, description="env names")
    rollout: RolloutSettings = RolloutSettings()
    estimator: str = Field(default="ppo_critic_pos", description="a name in ESTIMATORS")
    ppo: PPOSettings = PPOSettings()
    actor_weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay")
    critic: CriticSettings = CriticSettings()
    curriculum: CurriculumSettings = CurriculumSettings()
    deepspeed: Path | None = Field(
        default=None, description="a ZeRO-2 JSON for the policy update (GPU launcher), or null"
    )

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, name: str) -> str:
        if name not in ESTIMATORS.names():
            raise ValueError(f"unknown estimator {name!r}; known: {ESTIMATORS.names()}")
        return name

    @model_validator(mode="after")
    def _supported(self) -> RLTrainSettings:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels must be distinct, got {self.levels}")
        if self.ppo.entropy_coef > 0:  # HFPolicy.score returns token log-probs, not logits
            raise ValueError("entropy_coef > 0 is not supported: the trainer scores no logits")
        return self

    @property
    def needs_values(self) -> bool:
        return self.estimator in ESTIMATORS_WITH_VALUES


def load_train_settings(
    preset: str | Path, overrides: dict[str, Any] | None = None
) -> RLTrainSettings:
    """A preset under ``configs/odysseus/`` or a YAML path (following ``inherit:``), with
    nested ``overrides``."""
    return load_preset(RLTrainSettings, preset, overrides, kind="odysseus", what="RL")

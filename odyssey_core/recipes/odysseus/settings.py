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

from odyssey_core.config import (
    GameBoyEnvConfig,
    StrictModel,
    config_dir,
    load_preset,
    resolve_data_path,
)
from odyssey_core.launch import LaunchSettings
from odyssey_core.models.lora import LoraSettings
from odyssey_core.policy.base import GenerationParams
from odyssey_core.policy.weight_sync import RolloutBackendSettings
from odyssey_core.rl.advantages import ESTIMATORS
from odyssey_core.rl.settings import CriticSettings, ModelSettings

__all__ = [
    "ODYSSEUS_ESTIMATORS",
    "CurriculumSettings",
    "ModelSettings",
    "PPOSettings",
    "RLTrainSettings",
    "RolloutSettings",
    "load_train_settings",
]

#: the seven estimators of the paper's Appendix C.1 (Figure 4 compares them); a preset may name
#: any estimator in ESTIMATORS
ODYSSEUS_ESTIMATORS = (
    "ppo_critic",
    "ppo_critic_pos",
    "grpo_outcome",
    "grpo_outcome_pos",
    "grpo_process",
    "grpo_process_pos",
    "reinforce_pp",
)


class PPOSettings(StrictModel):
    """The clipped surrogate of Appendix C.1, token-mean over each minibatch (verl style)."""

    eps_low: float = Field(default=0.2, ge=0, lt=1, description="Tables 4 and 9: epsilon_low 0.2")
    eps_high: float = Field(default=0.28, ge=0, description="Tables 4 and 9: epsilon_high 0.28")
    gamma: float = Field(
        default=0.95, ge=0, le=1, description="Tables 4 and 9: discount factor 0.95"
    )
    epochs: int = Field(default=1, ge=1, description="Tables 4 and 9: 1 epoch per training step")
    minibatch_size: int = Field(
        default=4096, ge=1, description="turns per minibatch: Table 9 4096 (Table 4: 1024)"
    )
    lr: float = Field(
        default=1e-6, gt=0, description="Table 9: 1e-6, constant (Table 4 ablations: 5e-5)"
    )
    grad_clip: float = Field(
        default=1.0, gt=0, description="actor gradient-norm clip (not given; verl's default)"
    )
    kl_coef: float = Field(
        default=0.0, ge=0, description="beta of the k3 KL-to-reference penalty; the paper uses none"
    )
    entropy_coef: float = Field(
        default=0.0, ge=0, description="entropy bonus coefficient; the paper uses none"
    )
    skip_zero_advantage: bool = Field(
        default=True,
        description="leave turns whose advantage is exactly 0 out of the update (the compute "
        "saving of positive-advantage filtering)",
    )


class CurriculumSettings(StrictModel):
    """Inverse-trajectory-length level sampling (paper Section 6.2)."""

    enabled: bool = Field(default=True, description="Section 6.2: on for multi-level training")
    floor: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="minimum probability per level before renormalising (the paper has none)",
    )


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
    backend: RolloutBackendSettings = Field(
        default=RolloutBackendSettings(),
        description="the engine that samples: hf (the trainer's model), vllm (in-process, "
        "colocated) or openai (a server: odyssey serve or vLLM); weights synced every update",
    )
    start_states: dict[str, Path] = Field(
        default_factory=dict,
        description="level -> a save-state file its episodes start from (Section 4.2's "
        "scenario); levels not named start at the level start",
    )


class RLTrainSettings(StrictModel):
    """Everything one RL run needs; each section maps onto one building block."""

    seed: int = 0
    steps: int = Field(default=100, ge=1, description="training steps (Table 9: 190)")
    max_turn_samples: int | None = Field(
        default=None,
        ge=1,
        description="also stop once this many turns were collected (Section 4.2: 0.38M)",
    )
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
    launch: LaunchSettings = Field(
        default=LaunchSettings(),
        description="processes and launcher of the pipeline's training stage (1: in-process)",
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
        unknown = set(self.rollout.start_states) - set(self.levels)
        if unknown:
            raise ValueError(f"rollout.start_states names levels not trained on: {sorted(unknown)}")
        for level, path in self.rollout.start_states.items():
            found = resolve_data_path(path)
            if not found.is_file():
                raise ValueError(
                    f"rollout.start_states[{level!r}]: no save-state file at {path} (looked in "
                    f"the working directory and under {config_dir().parent}); record one with "
                    "`python -m odyssey_core.eval.scenarios --env <level> --turns N --out <file>`"
                )
            self.rollout.start_states[level] = found
        return self

    @property
    def needs_values(self) -> bool:
        """Whether the estimator reads the critic (the others train it for its metrics only)."""
        return ESTIMATORS.get(self.estimator).needs_values


def load_train_settings(
    preset: str | Path, overrides: dict[str, Any] | None = None
) -> RLTrainSettings:
    """A preset under ``configs/odysseus/`` or a YAML path (following ``inherit:``), with
    nested ``overrides``."""
    return load_preset(RLTrainSettings, preset, overrides, kind="odysseus", what="RL")

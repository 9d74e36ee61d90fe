"""The configuration of a whole RL run (``odyssey train``), loaded from ``configs/odysseus/``.

A preset is a YAML mapping of the sections below. A preset may start with
``inherit: other.yaml`` (a path relative to the preset's own folder): the other file is loaded
first (recursively) and this file's keys are deep-merged on top, so the Figure 4 estimator
presets are three-line overlays on ``compare.yaml``. Unknown keys are errors; a renamed key
fails with its new name (:attr:`RLTrainSettings.renamed_keys`). The sections every recipe
shares (``rollout``, ``advantage``, ``ppo``, ``launch``, ...) are
:class:`~odyssey_core.rl.train_settings.TrainSettings`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from odyssey_core.config import (
    GameBoyEnvConfig,
    StrictModel,
    load_preset,
    redefault,
)
from odyssey_core.eval.scenarios import LevelStartSettings
from odyssey_core.policy.base import GenerationParams
from odyssey_core.rl.advantages import AdvantageSettings
from odyssey_core.rl.settings import CriticSettings, ModelSettings
from odyssey_core.rl.train_settings import PPOSettings, RolloutSettings, TrainSettings

__all__ = [
    "ODYSSEUS_ESTIMATORS",
    "CurriculumSettings",
    "ModelSettings",
    "OdysseusAdvantageSettings",
    "OdysseusPPOSettings",
    "OdysseusRolloutSettings",
    "RLTrainSettings",
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


class OdysseusAdvantageSettings(AdvantageSettings):
    """One of the seven estimators of Appendix C.1 (Figure 4 compares them)."""

    estimator: str = redefault(
        AdvantageSettings,
        "estimator",
        "ppo_critic_pos",
        "Section 4: positive-advantage filtering with the CNN critic; any name in ESTIMATORS "
        "(ODYSSEUS_ESTIMATORS are the paper's)",
    )
    gamma: float = redefault(
        AdvantageSettings, "gamma", 0.95, "Tables 4 and 9: discount factor 0.95"
    )


class OdysseusPPOSettings(PPOSettings):
    """The clipped surrogate of Appendix C.1, token-mean over each minibatch (verl style)."""

    clip_low: float = redefault(PPOSettings, "clip_low", 0.2, "Tables 4 and 9: epsilon_low 0.2")
    clip_high: float = redefault(
        PPOSettings, "clip_high", 0.28, "Tables 4 and 9: epsilon_high 0.28"
    )
    epochs: int = redefault(PPOSettings, "epochs", 1, "Tables 4 and 9: 1 epoch per training step")
    minibatch_size: int = redefault(
        PPOSettings, "minibatch_size", 4096, "turns per minibatch: Table 9 4096 (Table 4: 1024)"
    )
    lr: float = redefault(
        PPOSettings, "lr", 1e-6, "Table 9: 1e-6, constant (Table 4 ablations: 5e-5)"
    )
    grad_clip: float = redefault(
        PPOSettings, "grad_clip", 1.0, "actor gradient-norm clip (not given; verl's default)"
    )
    kl_coef: float = Field(
        default=0.0, ge=0, description="beta of the k3 KL-to-reference penalty; the paper uses none"
    )
    skip_zero_advantage: bool = Field(
        default=True,
        description="leave turns whose advantage is exactly 0 out of the update (the compute "
        "saving of positive-advantage filtering)",
    )
    drop_episode_tail: int = Field(
        default=0,
        ge=0,
        description="leave each trajectory's last n turns out of the policy update (their "
        "returns still count for the earlier turns' advantages); the paper is silent, the "
        "public release drops 5",
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


class OdysseusRolloutSettings(RolloutSettings, LevelStartSettings):
    """How each training step collects its batch (Table 4 / Table 9 "rollout" rows)."""

    num_trajectories: int = Field(default=128, ge=1, description="complete episodes per step")
    max_turns: int = Field(default=80, ge=1, description="Table 4: 80; Table 9: 400")
    n_envs: int = Field(default=8, ge=1, description="environments stepped in lockstep")
    vector: Literal["sync", "subproc"] = Field(
        default="sync", description="in-process envs or one worker process per env"
    )
    generation: GenerationParams = redefault(
        RolloutSettings,
        "generation",
        GenerationParams(temperature=1.0, top_p=1.0, max_new_tokens=1024),
        "Table 4: temperature 1, top_p 1, response length 1024",
    )


class RLTrainSettings(TrainSettings):
    """Everything one Odysseus run needs; each section maps onto one building block."""

    renamed_keys: ClassVar[Mapping[str, str]] = {
        "estimator": "advantage.estimator",
        "ppo.eps_low": "ppo.clip_low",
        "ppo.eps_high": "ppo.clip_high",
        "ppo.gamma": "advantage.gamma",
        "actor_weight_decay": "ppo.weight_decay",
    }

    steps: int = Field(default=100, ge=1, description="training steps (Table 9: 190)")
    max_turn_samples: int | None = Field(
        default=None,
        ge=1,
        description="also stop once this many turns were collected (Section 4.2: 0.38M)",
    )
    out_dir: Path | None = Field(default=None, description="overridden by `--out`")
    env: GameBoyEnvConfig = Field(
        default=GameBoyEnvConfig(), description="turn settings shared by every level"
    )
    levels: list[str] = Field(default=["odland-1-1"], min_length=1, description="env names")
    rollout: OdysseusRolloutSettings = OdysseusRolloutSettings()
    advantage: OdysseusAdvantageSettings = OdysseusAdvantageSettings()
    ppo: OdysseusPPOSettings = OdysseusPPOSettings()
    critic: CriticSettings = CriticSettings()
    curriculum: CurriculumSettings = CurriculumSettings()

    @model_validator(mode="after")
    def _supported(self) -> RLTrainSettings:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels must be distinct, got {self.levels}")
        self.rollout.resolve_start_states(self.levels, section="rollout.")
        return self


def load_train_settings(
    preset: str | Path, overrides: dict[str, Any] | None = None
) -> RLTrainSettings:
    """A preset under ``configs/odysseus/`` or a YAML path (following ``inherit:``), with
    nested ``overrides``."""
    return load_preset(RLTrainSettings, preset, overrides, kind="odysseus", what="RL")

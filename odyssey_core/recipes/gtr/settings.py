"""The configuration of a GTR run, loaded from ``configs/gtr/`` (GTR paper Table 2).

A preset may start with ``inherit: other.yaml`` (relative to its own folder); this file's keys
are deep-merged over the parent, so the ablations in ``configs/gtr/ablations/`` are overlays.
Unknown keys are errors; a renamed key fails with its new name
(:attr:`GTRSettings.renamed_keys`). The sections every recipe shares (``rollout``,
``advantage``, ``ppo``, ``launch``, ...) are
:class:`~odyssey_core.rl.train_settings.TrainSettings`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator

from odyssey_core.config import StrictModel, load_preset, redefault
from odyssey_core.models.lora import LoraSettings
from odyssey_core.policy.base import GenerationParams
from odyssey_core.recipes.gtr.corrector import (
    NO_CORRECTOR,
    split_corrector_spec,
    validate_corrector_kwargs,
)
from odyssey_core.recipes.gtr.rewards import GTRRewardConfig
from odyssey_core.rl.advantages import AdvantageSettings
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rl.train_settings import PPOSettings, RolloutSettings, TrainSettings
from odyssey_core.rl.value_functions import VALUE_FUNCTIONS

__all__ = [
    "CorrectorChoice",
    "GTRAdvantageSettings",
    "GTRPPOSettings",
    "GTRRolloutSettings",
    "GTRSFTSettings",
    "GTRSettings",
    "GTRValueSettings",
    "load_gtr_settings",
]


class CorrectorChoice(BaseModel):
    """A section that names a corrector (``corrector``, a name in CORRECTORS or 'none') and its
    arguments (``corrector_kwargs``): a preset may write either ``corrector: {name: openai,
    model: gpt-4o, ...}`` or the two keys, and the arguments are checked against the
    corrector's settings when the preset loads. ``corrector_key`` is the key errors name."""

    corrector_key: ClassVar[str]

    corrector: str
    corrector_kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _corrector_mapping(cls, data: Any) -> Any:
        return split_corrector_spec(data)

    @model_validator(mode="after")
    def _known_corrector(self) -> Self:
        validate_corrector_kwargs(self.corrector, self.corrector_kwargs, self.corrector_key)
        return self


class GTRRolloutSettings(CorrectorChoice, RolloutSettings):
    """Turn collection: ``turns_per_step`` turns over ``n_envs`` envs that reset on their own."""

    corrector_key: ClassVar[str] = "rollout.corrector"

    env: str = Field(default="cards-points24", description="a cards registry name")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="e.g. max_steps")
    n_envs: int = Field(default=4, ge=1)
    turns_per_step: int = Field(
        default=512, ge=1, description="turns per update (RL4VLM's num_steps; rounded up to n_envs)"
    )
    generation: GenerationParams = redefault(
        RolloutSettings,
        "generation",
        GenerationParams(temperature=0.2, max_new_tokens=256, repetition_penalty=1.2),
        "Table 2: temperature 0.2, max text length 256, repetition penalty 1.2",
    )
    corrector: str = Field(
        default="openai",
        description="a name in CORRECTORS, or 'none'. A preset may write "
        "`corrector: {name: openai, model: gpt-4o, ...}`: the name here, the rest in "
        "corrector_kwargs. The paper's corrector is openai (GPT-4o with the solve24 tool); "
        "programmatic is an oracle that reads the game's hidden state",
    )
    corrector_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="the corrector's arguments (openai: OpenAICorrectorSettings: model, "
        "base_url, *_env variables, temperature 0.4, max_tokens 600, ...)",
    )
    rewards: GTRRewardConfig = GTRRewardConfig()


class GTRAdvantageSettings(AdvantageSettings):
    """GAE over V(o_t) from ``value.source``, as RL4VLM's PPO computes it (Table 2)."""

    estimator: str = redefault(
        AdvantageSettings,
        "estimator",
        "gae",
        "Table 2 / RL4VLM: GAE; any name in ESTIMATORS (the value function is value.source's)",
    )
    gamma: float = redefault(AdvantageSettings, "gamma", 0.9, "Table 2: discount 0.9")
    gae_lambda: float = redefault(AdvantageSettings, "gae_lambda", 0.95, "Table 2: GAE lambda 0.95")
    normalize: bool = redefault(
        AdvantageSettings, "normalize", True, "standardised over the batch, as RL4VLM's PPO"
    )


class GTRPPOSettings(PPOSettings):
    """Turn-level PPO on log pi(a_t) = lambda * log pi(thought) + log pi(action)."""

    enabled: bool = Field(default=True, description="false: the SFT-only ablation")
    clip_low: float = redefault(PPOSettings, "clip_low", 0.1, "Table 2: PPO clip 0.1")
    clip_high: float = redefault(PPOSettings, "clip_high", 0.1, "Table 2: PPO clip 0.1")
    thought_weight: float = Field(
        default=0.5, ge=0, description="Table 2: thought probability coefficient (Points24 0.5)"
    )
    epochs: int = redefault(PPOSettings, "epochs", 4, "Table 2: 4 PPO epochs")
    minibatch_size: int = redefault(
        PPOSettings, "minibatch_size", 128, "turns per optimiser step (Table 2: 128 accumulation)"
    )
    entropy_coef: float = redefault(
        PPOSettings,
        "entropy_coef",
        0.01,
        "Table 2: 0.01. The exact entropy of the sampling distribution, token-mean over the "
        "response tokens",
    )
    value_coef: float = Field(
        default=0.5,
        ge=0,
        description="Table 2: 0.5. With value.source vlm_head the value loss joins the PPO loss "
        "in one backward pass, so this weighs it against the policy terms; the CNN critic "
        "trains on its own optimiser, where it only scales a separate objective",
    )
    lr: float = redefault(PPOSettings, "lr", 1e-5, "Table 2: initial lr 1e-5")
    final_lr: float = Field(default=1e-9, ge=0, description="Table 2: final lr 1e-9 (cosine)")
    lr_steps: int = Field(default=25, ge=1, description="Table 2: maximum lr step 25")


class GTRSFTSettings(StrictModel):
    """Thought cloning on the DAgger buffer, added to the PPO loss."""

    coef: float = Field(default=1.0, ge=0, description="total = ppo + coef * sft; 0: RL only")
    batch_size: int = Field(default=8, ge=1, description="buffer examples per minibatch")
    dagger: bool = Field(default=True, description="false: clone the latest batch only")
    target: Literal["thought", "full_response"] = Field(
        default="thought",
        description="thought: loss on the corrected thought tokens only, the agent's action "
        "teacher-forced after it; full_response: clone thought + corrector action + end",
    )


class GTRValueSettings(StrictModel):
    """Where V(o_t) comes from: a value function registered in ``VALUE_FUNCTIONS`` (the CNN
    critic on the frame, a head on the VLM, or one registered beside them)."""

    source: str = Field(
        default="vlm_head",
        description="a name in VALUE_FUNCTIONS. vlm_head (the paper's, after RL4VLM): an MLP on "
        "the policy's final hidden state at the last prompt token, trained with "
        "ppo.value_coef (0.5) * value loss in the PPO backward pass; cnn: "
        "odyssey_core.rl.critic on its own optimiser (the ``critic`` section)",
    )
    head_hidden_dims: list[int] = Field(
        default_factory=lambda: [1024, 512],
        description="vlm_head hidden layers (RL4VLM's value head is 1024-512); [] for linear",
    )
    scale: float = Field(
        default=1.0,
        gt=0,
        description="vlm_head's output units: it predicts returns / scale (outputs stay near "
        "1); its loss is RL4VLM's 0.5 * MSE on unscaled returns whatever the scale",
    )
    head_lr: float | None = Field(
        default=None,
        gt=0,
        description="the head's learning rate (same optimiser and schedule); null: ppo.lr",
    )

    @field_validator("source")
    @classmethod
    def _registered_source(cls, source: str) -> str:
        if source not in VALUE_FUNCTIONS:
            raise ValueError(
                f"value.source {source!r} is not a registered value function; known: "
                f"{', '.join(VALUE_FUNCTIONS.names())} (odyssey_core.rl.value_functions)"
            )
        return source

    @model_validator(mode="after")
    def _positive_dims(self) -> GTRValueSettings:
        if any(d < 1 for d in self.head_hidden_dims):
            raise ValueError(f"head_hidden_dims must be positive, got {self.head_hidden_dims}")
        return self


class GTRSettings(TrainSettings):
    """Everything one GTR run needs."""

    renamed_keys: ClassVar[Mapping[str, str]] = {
        "ppo.clip": "ppo.clip_low and ppo.clip_high (Table 2: 0.1 both)",
        "ppo.gamma": "advantage.gamma",
        "ppo.gae_lambda": "advantage.gae_lambda",
        "ppo.normalize_advantages": "advantage.normalize",
    }

    steps: int = Field(default=30, ge=1, description="updates (Points24: 15000 env steps / 512)")
    lora: LoraSettings | None = redefault(
        TrainSettings,
        "lora",
        LoraSettings(r=128, alpha=256, dropout=0.05, include_vision=True, include_projector=True),
        "Table 2: r 128, alpha 256, dropout 0.05; App. B: the whole VLM (vision encoder, LLM "
        "and the projector between them); null: full fine-tuning",
    )
    rollout: GTRRolloutSettings = GTRRolloutSettings()
    advantage: GTRAdvantageSettings = GTRAdvantageSettings()
    ppo: GTRPPOSettings = GTRPPOSettings()
    sft: GTRSFTSettings = GTRSFTSettings()
    critic: CriticSettings = CriticSettings()
    value: GTRValueSettings = GTRValueSettings()

    @model_validator(mode="after")
    def _something_to_train(self) -> GTRSettings:
        if not self.ppo.enabled and self.sft.coef == 0:
            raise ValueError("ppo.enabled false and sft.coef 0 leave nothing to train")
        if self.value.source == "vlm_head" and not self.ppo.enabled:
            # the head learns only inside the PPO loss; without it, its values mean nothing
            raise ValueError("value.source vlm_head needs ppo.enabled (the head trains in PPO)")
        if self.value.source == "vlm_head" and self.deepspeed is not None:
            # the engine's DeepSpeed updater steps the policy model only (odyssey_core.rl.updater)
            raise ValueError(
                "value.source vlm_head with deepspeed: the DeepSpeed updater does not carry the "
                "value head yet; set deepspeed: null (the paper's single-GPU LoRA run) or "
                "value.source: cnn"
            )
        if self.rollout.corrector == NO_CORRECTOR and self.sft.coef > 0:
            raise ValueError(
                "rollout.corrector none leaves thought cloning nothing to clone: set sft.coef 0"
            )
        return self


def load_gtr_settings(preset: str | Path, overrides: dict[str, Any] | None = None) -> GTRSettings:
    """A preset under ``configs/gtr/`` or a YAML path (following ``inherit:``), with nested
    ``overrides``."""
    return load_preset(GTRSettings, preset, overrides, kind="gtr", what="GTR")

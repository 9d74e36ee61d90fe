"""Settings of the engine's building blocks that every recipe shares: the policy model and the
turn-level CNN critic. Defaults follow the Odysseus paper's tables where they say anything
(Table 7: the CNN critic).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from odyssey_core.config import StrictModel, redefault
from odyssey_core.models.loading import DTypeName


class OptimiserSettings(StrictModel):
    """One network's AdamW optimiser and how a training step's batch feeds it: the knobs the
    policy's section (``ppo:``) and the CNN critic's (``critic:``) share, declared once."""

    lr: float = Field(default=1e-6, gt=0, description="the learning rate")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay")
    grad_clip: float = Field(default=1.0, gt=0, description="the gradient-norm clip")
    epochs: int = Field(default=1, ge=1, description="passes over each training step's batch")
    minibatch_size: int = Field(
        default=256,
        ge=1,
        description="per optimiser step, in the sampler's unit (turns, or episodes)",
    )


class CriticSettings(OptimiserSettings):
    """The turn-level NatureCNN critic V(o_t) and its own optimiser (paper Appendix E.1;
    Table 7: weight decay 0.0, gradient clip 1.0, one optimisation epoch per step)."""

    input_height: int = Field(
        default=84,
        ge=36,
        description="frames are resized (bilinear) to this height; the tables give no input "
        "size, 84 is the NatureCNN convention (Mnih et al. 2015). 36 is the smallest the "
        "three convolutions accept",
    )
    input_width: int = Field(default=84, ge=36, description="see input_height")
    grayscale: bool = Field(
        default=False,
        description="convert RGB to luminance before the CNN (Nature DQN did; off keeps colour)",
    )
    hidden_dim: int = Field(default=512, ge=1, description="Table 7: hidden dimension 512")
    value_scale: float = Field(
        default=100.0,
        gt=0,
        description="the network predicts R / value_scale (the public release uses 100); "
        "predictions are reported back in return units",
    )
    loss: Literal["smooth_l1", "mse"] = Field(
        default="smooth_l1", description="Appendix C.1: SmoothL1(V(o_t) - R_t)"
    )
    smooth_l1_beta: float = Field(
        default=1.0, gt=0, description="SmoothL1 switch point, in scaled units"
    )
    lr: float = redefault(OptimiserSettings, "lr", 3e-4, "Table 7: learning rate 3e-4, constant")
    minibatch_size: int = redefault(
        OptimiserSettings,
        "minibatch_size",
        256,
        "turns per critic minibatch (not given in the tables); with update 'full_batch', the "
        "turns per forward/backward chunk the one gradient is summed over",
    )
    update: Literal["minibatches", "full_batch"] = Field(
        default="minibatches",
        description="per epoch: one optimiser step per shuffled minibatch, or one step on the "
        "whole batch's mean loss (the public release: one step per training step)",
    )
    warmup_steps: int = Field(
        default=0,
        ge=0,
        description="training steps that update only the critic before the actor may update "
        "(not given in the paper)",
    )
    predict_chunk: int = Field(
        default=1024, ge=1, description="turns per forward pass when predicting values"
    )
    device: str | None = Field(
        default=None,
        description="torch device of the critic ('cpu', 'cuda', 'cuda:1'); null: the device "
        "the recipe gives it (the policy's), else the CPU",
    )


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
    gradient_checkpointing: bool = Field(
        default=False,
        description="recompute each decoder layer's activations in the backward instead of "
        "keeping them (less activation memory, one more forward of compute per update)",
    )
    game: str = Field(default="odland", description="which system prompt the policy gets")

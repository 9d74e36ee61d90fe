"""Settings of the RL building blocks: the turn-level CNN critic, the PPO policy loss and the
multi-task auto-curriculum. Defaults follow the Odysseus paper's tables where they say
anything (Table 4: Section 4.2 ablations; Table 7: the CNN critic; Table 9: the main runs).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from odyssey_core.config import StrictModel


class CriticSettings(StrictModel):
    """The turn-level NatureCNN critic V(o_t) and its own optimiser (paper Appendix E.1)."""

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
    lr: float = Field(default=3e-4, gt=0, description="Table 7: learning rate 3e-4, constant")
    weight_decay: float = Field(default=0.0, ge=0, description="Table 7: weight decay 0.0")
    grad_clip: float = Field(default=1.0, gt=0, description="Table 7: gradient clip 1.0")
    epochs: int = Field(default=1, ge=1, description="Table 7: 1 optimisation epoch per step")
    minibatch_size: int = Field(
        default=256, ge=1, description="turns per critic minibatch (not given in the tables)"
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

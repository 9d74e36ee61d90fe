"""Settings of the supervised fine-tuning stage, and the YAML presets under ``configs/sft/``.

Defaults follow Table 8 of the Odysseus paper (hyper-parameters of the light SFT stage,
Appendix E.2-E.3), which the authors ran with the Qwen3-VL repository's trainer (HF Trainer).
Where the table is silent we use the HF Trainer defaults that setup would have picked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from odyssey_core.config import StrictModel, config_dir, load_preset
from odyssey_core.launch import LaunchSettings
from odyssey_core.models.lora import LoraSettings

__all__ = ["SFTSettings", "load_sft_settings"]


class SFTSettings(StrictModel):
    """Everything that shapes an SFT run except the dataset, model and output folders."""

    seed: int = 0
    epochs: int = Field(default=1, ge=1, description="Table 8: total epoch 1")
    max_steps: int | None = Field(
        default=None, ge=1, description="stop after this many optimizer steps (None: epochs)"
    )
    expected_dataset_size: int | None = Field(
        default=None,
        ge=1,
        description="train rows the preset was tuned for (Table 8: 5058); a mismatch is logged",
    )
    batch_size: int = Field(
        default=128, ge=1, description="samples per optimizer step, all devices (Table 8: 128)"
    )
    grad_accum_steps: int = Field(
        default=2, ge=1, description="micro-batches per optimizer step (Table 8: 2)"
    )
    lr: float = Field(default=1e-7, gt=0, description="peak learning rate (Table 8: 1e-7)")
    lr_scheduler: Literal["cosine", "constant"] = Field(
        default="cosine", description="Table 8: cosine (decays to min_lr_ratio x lr)"
    )
    warmup_ratio: float = Field(
        default=0.03, ge=0, lt=1, description="linear warm-up share of the steps (Table 8: 0.03)"
    )
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1, description="cosine floor (HF: 0)")
    weight_decay: float = Field(default=0.0, ge=0, description="not in Table 8; HF default 0")
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    max_grad_norm: float | None = Field(
        default=1.0, gt=0, description="gradient-norm clip (not in Table 8; HF default 1.0)"
    )
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="auto: bf16 autocast on CUDA, float32 on CPU"
    )
    model_dtype: Literal["float32", "bfloat16"] = Field(
        default="float32", description="dtype the weights are loaded (and kept) in"
    )
    device: str = Field(default="auto", description="'auto' (cuda when available), 'cpu', ...")
    attn_implementation: str = "sdpa"
    image_scale: int | None = Field(
        default=None, ge=1, description="nearest-neighbour frame upsampling, as the policy's"
    )
    image_size: tuple[int, int] | None = None
    gradient_checkpointing: bool = False
    vision_lr_scale: float = Field(
        default=1.0,
        ge=0,
        description="learning-rate multiplier of the vision encoder and its merger "
        "(model.visual); 0 freezes them (the paper: 1, all weights at the same rate)",
    )
    lora: LoraSettings | None = Field(
        default=None, description="train a LoRA adapter instead of all weights (paper: full)"
    )
    eval_every: int = Field(
        default=0, ge=0, description="eval loss on the val split every N steps (0: at the end)"
    )
    eval_max_samples: int | None = Field(default=None, ge=1)
    eval_batch_size: int | None = Field(default=None, ge=1, description="default: micro batch")
    checkpoint_every: int = Field(default=50, ge=1, description="optimizer steps per checkpoint")
    keep_checkpoints: int | None = Field(
        default=None, ge=1, description="keep only the newest N step-* folders (None: all)"
    )
    log_every: int = Field(default=1, ge=1)
    answer_balance: Literal["none", "sampler", "loss"] = Field(
        default="none",
        description="up-weight rare answers (the answer is the row's set of buttons): "
        "'sampler' draws each epoch's rows with replacement, a row of answer c with probability "
        "proportional to w_c; 'loss' keeps the plain shuffle and scales each row's response "
        "tokens by w_c (the logged train loss is then the weighted token mean; the eval loss "
        "stays unweighted). w_c = (n / (K n_c))^answer_balance_power for n rows, K answers, "
        "n_c rows of answer c. 'none' (the paper): every row once per epoch, weight 1",
    )
    answer_balance_power: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="1: full inverse frequency (every answer weighs the same in total); "
        "0.5: square-root (rare answers count more, the majority still most); 0: no effect",
    )
    deepspeed: Path | None = Field(
        default=None, description="DeepSpeed JSON config (e.g. configs/deepspeed/zero2.json)"
    )
    launch: LaunchSettings = Field(
        default=LaunchSettings(),
        description="processes and launcher of the pipeline's SFT stage (1: in-process)",
    )

    @model_validator(mode="after")
    def _check(self) -> SFTSettings:
        if self.batch_size % self.grad_accum_steps:
            raise ValueError("batch_size must be a multiple of grad_accum_steps")
        if self.image_scale is not None and self.image_size is not None:
            raise ValueError("give image_scale or image_size, not both")
        return self

    def deepspeed_config(self) -> Path | None:
        """The DeepSpeed JSON path; a relative one not found from the working directory is
        read relative to the repository (presets name ``configs/deepspeed/zero2.json``)."""
        if self.deepspeed is None or self.deepspeed.is_absolute() or self.deepspeed.exists():
            return self.deepspeed
        return config_dir().parent / self.deepspeed


def load_sft_settings(preset: str | Path = "tiny", overrides: dict | None = None) -> SFTSettings:
    """An SFT preset under ``configs/sft/`` or a YAML path, with nested ``overrides``."""
    return load_preset(SFTSettings, preset, overrides, kind="sft", what="SFT")

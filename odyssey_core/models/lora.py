"""LoRA adapters for Qwen-VL policies, with PEFT.

By default only the language model's attention and MLP projections get adapters; the vision
tower stays frozen unless ``include_vision`` is set (then its attention and MLP linears are
adapted too), and so does the projector between them (Qwen-VL's patch merger) unless
``include_projector`` is set. Adapters are saved on their own (a few MB) and can be merged
into the base weights to export a plain checkpoint that :func:`odyssey_core.models.load_model`
reads.
"""

from __future__ import annotations

import contextlib
import copy
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from odyssey_core.config import StrictModel
from odyssey_core.models.loading import load_model

__all__ = [
    "LoraSettings",
    "apply_lora",
    "load_adapter",
    "lora_dropout_active",
    "lora_dropout_modules",
    "lora_target_regex",
    "merge_and_save",
    "save_adapter",
    "trainable_parameters",
]

LANGUAGE_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Linear layers inside vision blocks: Qwen3-VL (qkv, proj, linear_fc1/2) and Qwen2.5-VL
# (qkv, proj, gate/up/down_proj).
VISION_TARGETS = ("qkv", "proj", "linear_fc1", "linear_fc2", "gate_proj", "up_proj", "down_proj")
# The projector from vision features to the language model: Qwen3-VL's merger and its
# deepstack mergers (linear_fc1/2), Qwen2.5-VL's merger (an MLP: mlp.0 and mlp.2).
PROJECTOR_PATTERN = r".*visual\.(?:merger|deepstack_merger_list\.\d+)\.(?:linear_fc\d|mlp\.\d+)"


class LoraSettings(StrictModel):
    """Where LoRA goes and how big it is."""

    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = Field(
        default=LANGUAGE_TARGETS, description="linear layer names inside the language model"
    )
    include_vision: bool = Field(default=False, description="also adapt the vision blocks")
    include_projector: bool = Field(
        default=False,
        description="also adapt the vision-language projector (the merger's linear layers)",
    )
    bias: Literal["none", "all", "lora_only"] = "none"


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    # PEFT calls a transformers method that 5.x deprecates; nothing for us to act on.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        yield


def lora_target_regex(settings: LoraSettings) -> str:
    """A PEFT ``target_modules`` regex restricted to the language model (and the vision
    blocks, and the projector)."""
    names = "|".join(re.escape(n) for n in settings.target_modules)
    pattern = rf".*language_model\..*\.({names})"
    if settings.include_vision:
        vision = "|".join(re.escape(n) for n in VISION_TARGETS)
        pattern += rf"|.*visual\.blocks\..*\.({vision})"
    if settings.include_projector:
        pattern += "|" + PROJECTOR_PATTERN
    return pattern


def apply_lora(model: Any, settings: LoraSettings | None = None) -> Any:
    """Wrap ``model`` in a PEFT LoRA model; only the adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    settings = settings or LoraSettings()
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=lora_target_regex(settings),
        bias=settings.bias,
        task_type="CAUSAL_LM",
    )
    with _quiet_peft():
        return get_peft_model(model, config)


def lora_dropout_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every LoRA adapter's dropout (PEFT keeps them in each adapted layer's ``lora_dropout``;
    a zero rate is an ``Identity``, so it is left out)."""
    return [
        dropout
        for module in model.modules()
        if isinstance(getattr(module, "lora_dropout", None), torch.nn.ModuleDict)
        for dropout in module.lora_dropout.values()
        if isinstance(dropout, torch.nn.Dropout)
    ]


@contextlib.contextmanager
def lora_dropout_active(model: torch.nn.Module) -> Iterator[list[torch.nn.Module]]:
    """LoRA's dropout on inside the block, for the update's forward passes (the paper's
    LoRA dropout, 0.05), while every other module keeps its mode: the policy stays in eval
    mode, so rollouts, old log-probs, value predictions and evaluation never drop anything.
    Each dropout's mode is restored on exit; yields the dropouts (none without LoRA)."""
    dropouts = lora_dropout_modules(model)
    before = [d.training for d in dropouts]
    for dropout in dropouts:
        dropout.train()
    try:
        yield dropouts
    finally:
        for dropout, training in zip(dropouts, before, strict=True):
            dropout.train(training)


def trainable_parameters(model: Any) -> dict[str, Any]:
    """Name -> parameter for everything that will receive gradients."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def save_adapter(model: Any, out_dir: str | Path) -> Path:
    """Save only the adapter (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    return out


def load_adapter(
    base_path: str | Path,
    adapter_dir: str | Path,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    trainable: bool = False,
) -> Any:
    """Load the base checkpoint and put the saved adapter on top of it."""
    from peft import PeftModel

    adapter = Path(adapter_dir)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{str(adapter)!r} has no adapter_config.json")
    base = load_model(base_path, dtype=dtype, device=device)
    with _quiet_peft():
        model = PeftModel.from_pretrained(
            base, adapter, is_trainable=trainable, local_files_only=True
        )
    return model.to(device)


def merge_and_save(
    model: Any, out_dir: str | Path, processor: Any = None, *, inplace: bool = False
) -> Path:
    """Fold the adapter into the base weights and save a plain checkpoint to ``out_dir``.

    Works on a copy unless ``inplace`` (the copy doubles memory; pass ``inplace=True`` for
    big models when the adapted model is no longer needed). Saving the ``processor`` too makes
    the folder a complete checkpoint for ``load_model`` / ``load_processor``.
    """
    target = model if inplace else copy.deepcopy(model)
    merged = target.merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out, safe_serialization=True)
    if processor is not None:
        processor.save_pretrained(out)
    return out

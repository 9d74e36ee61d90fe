"""Build the policy a run trains: the base model (or a tiny offline Qwen3-VL), a fresh LoRA
adapter when configured, or a checkpoint's weights/adapter when resuming."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from odyssey_core.models.loading import load_model, load_processor
from odyssey_core.models.lora import LoraSettings, apply_lora, load_adapter
from odyssey_core.models.tiny import ensure_tiny_model
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.rl.checkpoint import policy_dir
from odyssey_core.rl.settings import ModelSettings
from odyssey_core.rollout.batch import TurnBatch

#: ``turns -> log pi_ref`` per response token, for a KL penalty to a frozen reference
ReferenceScorer = Callable[[TurnBatch], list[torch.Tensor]]

__all__ = [
    "BASE_MODEL_DIR",
    "ReferenceScorer",
    "build_policy",
    "build_reference",
    "enable_gradient_checkpointing",
    "resolve_base_model",
]

BASE_MODEL_DIR = "base-model"


def resolve_base_model(model: ModelSettings, out_dir: Path) -> Path:
    """The base checkpoint; with ``model.path: null`` a tiny Qwen3-VL is built into the run
    (again, when a build was killed part-way)."""
    if model.path is not None:
        return Path(model.path)
    # fixed seed: the same tiny model for every run
    return ensure_tiny_model(Path(out_dir) / BASE_MODEL_DIR, seed=0)


def build_policy(
    model: ModelSettings,
    lora: LoraSettings | None,
    out_dir: Path,
    checkpoint: Path | None = None,
    **policy_kwargs: Any,
) -> HFPolicy:
    """An HFPolicy on the base model (+ fresh LoRA), or on a checkpoint's weights/adapter.

    ``policy_kwargs`` go to :class:`HFPolicy` (``game=`` or ``system_prompt=``). The model is
    put in eval mode: rollouts, old log-probs and evaluation run without dropout; the
    trainer turns LoRA's dropout on for the update's forward passes only
    (:func:`~odyssey_core.models.lora.lora_dropout_active`). ``model.gradient_checkpointing``
    turns on activation checkpointing (:func:`enable_gradient_checkpointing`).
    """
    base = resolve_base_model(model, out_dir)
    kwargs = {"dtype": model.dtype, "device": model.device}
    if checkpoint is None:
        network = load_model(base, attn_implementation=model.attn_implementation, **kwargs)
        if lora is not None:
            network = apply_lora(network, lora)
    elif lora is not None:
        network = load_adapter(base, policy_dir(checkpoint), trainable=True, **kwargs)
    else:
        network = load_model(
            policy_dir(checkpoint), attn_implementation=model.attn_implementation, **kwargs
        )
    processor = load_processor(base if checkpoint is None else policy_dir(checkpoint))
    network.eval()
    if model.gradient_checkpointing:
        enable_gradient_checkpointing(network)
    return HFPolicy(
        network,
        processor,
        image_scale=model.image_scale,
        image_size=model.image_size,
        **policy_kwargs,
    )


def enable_gradient_checkpointing(network: Any) -> list[torch.nn.Module]:
    """Recompute each decoder and vision block's activations in the backward pass, even in
    eval mode; returns the checkpointed blocks.

    transformers' checkpointing (``activation_checkpointing_enable``, non-reentrant
    ``torch.utils.checkpoint``) only acts on blocks in training mode, and the RL policy stays
    in eval mode (no dropout, exact PPO ratios), so enabling it alone would silently keep
    every activation. A forward pre-hook on each block therefore marks that block (only the
    block: its attention, MLP and any dropout stay in eval mode, so the numbers are the eval
    model's) as training right before it runs, and no ``eval()`` / ``train()`` call anywhere
    (``generate`` makes them) can switch checkpointing off. Under ``no_grad`` (rollouts, old
    log-probs) the blocks run as usual, with their KV cache.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    model = network.get_base_model() if hasattr(network, "get_base_model") else network
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    blocks = [
        m
        for m in model.modules()
        if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing
    ]
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no blocks to checkpoint")
    for block in blocks:
        block.register_forward_pre_hook(_mark_training)
    return blocks


def _mark_training(block: torch.nn.Module, _inputs: Any) -> None:
    block.training = True


def build_reference(
    policy: HFPolicy,
    temperature: float,
    micro_batch: int,
    frozen_model: Path | None = None,
) -> ReferenceScorer:
    """log pi_ref for a KL penalty. With a LoRA adapter the reference is the base model under
    it (the adapter switched off: no second copy in memory); a fully fine-tuned policy needs
    ``frozen_model``, the folder it started from (e.g. the SFT model), loaded once, frozen."""
    model = policy.model
    if hasattr(model, "disable_adapter"):
        scorer, switch_off = policy, model.disable_adapter
    elif frozen_model is not None:
        frozen = load_model(
            frozen_model,
            dtype=str(model.dtype).removeprefix("torch."),
            device=str(next(model.parameters()).device),
        )
        frozen.eval().requires_grad_(False)
        scorer = HFPolicy(
            frozen,
            policy.processor,
            system_prompt=policy.system_prompt,
            image_scale=policy.image_scale,
            image_size=policy.image_size,
        )
        switch_off = contextlib.nullcontext
    else:
        raise ValueError(
            "a KL penalty needs a reference: train with LoRA (the base model is the reference) "
            "or give the frozen starting model"
        )

    def reference(turns: TurnBatch) -> list[torch.Tensor]:
        with switch_off(), torch.no_grad():
            scored = scorer.score(
                turns.prompt_ids, turns.response_ids, turns.frames, temperature, micro_batch
            )
        return [r.detach().float().cpu() for r in scored]

    return reference

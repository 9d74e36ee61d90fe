"""Crash-safe RL checkpoints: ``<out>/checkpoints/step-XXXXXX/`` plus a ``latest`` pointer.

A checkpoint folder holds

    policy/             the model (``save_pretrained`` safetensors) or only its LoRA adapter,
                        and the processor, so the folder loads like any checkpoint
    trainer_state.pt    critic, optimiser(s), RNG states, curriculum, counters (loadable with
                        ``torch.load(weights_only=True)``: tensors, numbers, strings, containers)
    config.json         the run's settings

Why it is crash-safe: everything is written into ``.tmp-step-XXXXXX`` and renamed to its final
name only when complete, and ``latest`` (the name of the newest complete folder) is replaced
atomically after that. A run killed at any instant leaves ``latest`` naming a complete
checkpoint; half-written ``.tmp-*`` folders are ignored and removed on the next save.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from odyssey_core.common.checkpointing import (
    CHECKPOINTS_DIR,
    STATE_FILE,
    capture_rng_state,
    checkpoint_name,
    latest_checkpoint,
    point_latest,
    restore_rng_state,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "capture_rng_state",
    "checkpoint_name",
    "latest_checkpoint",
    "load_trainer_state",
    "restore_rng_state",
    "save_checkpoint",
]

POLICY_DIR = "policy"
CONFIG_FILE = "config.json"


# -- save / find / load ---------------------------------------------------------------------------


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    *,
    model: Any,
    processor: Any,
    trainer_state: dict[str, Any],
    config: dict[str, Any],
    extra_writer: Any = None,
) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest`` at it; returns its folder.

    ``model`` is saved with its own ``save_pretrained`` (a PEFT model writes only its adapter).
    ``extra_writer(folder)``, if given, writes more files (e.g. DeepSpeed's optimiser shards).
    """
    root = Path(out_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # leftovers of a run killed mid-save
        shutil.rmtree(stale, ignore_errors=True)
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{checkpoint_name(step)}"
    model.save_pretrained(tmp / POLICY_DIR, safe_serialization=True)
    processor.save_pretrained(tmp / POLICY_DIR)
    torch.save(trainer_state, tmp / STATE_FILE)
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    if extra_writer is not None:
        extra_writer(tmp)
    if final.exists():  # a re-run of the same step after a resume overwrites it
        shutil.rmtree(final)
    os.replace(tmp, final)
    point_latest(out_dir, final)
    return final


#: the only non-container types a DeepSpeed ZeRO optimiser puts in its state dict
_DEEPSPEED_STATE_TYPES = (
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
)


def deepspeed_state_types() -> list[type]:
    """DeepSpeed's optimiser-state types, when DeepSpeed is installed (else none)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        return []
    return [getattr(importlib.import_module(m), name) for m, name in _DEEPSPEED_STATE_TYPES]


def load_trainer_state(checkpoint: str | Path) -> dict[str, Any]:
    """The ``trainer_state.pt`` of a checkpoint, read with ``weights_only=True``: tensors,
    numbers, strings, containers, and exactly the types DeepSpeed's ZeRO optimiser stores."""
    with torch.serialization.safe_globals(deepspeed_state_types()):
        return torch.load(Path(checkpoint) / STATE_FILE, weights_only=True, map_location="cpu")


def policy_dir(checkpoint: str | Path) -> Path:
    return Path(checkpoint) / POLICY_DIR

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
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from odyssey_core.common.checkpointing import (
    CHECKPOINTS_DIR,
    STATE_FILE,
    CheckpointWriteError,
    capture_rng_state,
    checkpoint_name,
    checkpoint_write_error,
    latest_checkpoint,
    point_latest,
    restore_rng_state,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "CheckpointWriteError",
    "capture_rng_state",
    "checkpoint_name",
    "latest_checkpoint",
    "load_trainer_state",
    "restore_rng_state",
    "save_checkpoint",
]

POLICY_DIR = "policy"
_OS_ERROR_RE = re.compile(r"\(os error (\d+)\)")
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
    try:
        model.save_pretrained(tmp / POLICY_DIR, safe_serialization=True)
        processor.save_pretrained(tmp / POLICY_DIR)
        with open(tmp / STATE_FILE, "wb") as handle:  # a file object: a failed write
            torch.save(trainer_state, handle)  # keeps its OSError (ENOSPC) as the context
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
        if extra_writer is not None:
            extra_writer(tmp)
    except Exception as error:  # full disk, quota, ...: drop the partial folder, say what to do
        shutil.rmtree(tmp, ignore_errors=True)
        cause = _os_error_in(error)
        if cause is None:
            raise
        raise checkpoint_write_error(cause, out_dir, f"checkpoint {final.name}") from error
    if final.exists():  # a re-run of the same step after a resume overwrites it
        shutil.rmtree(final)
    os.replace(tmp, final)
    try:
        point_latest(out_dir, final)
    except OSError as error:  # the folder is complete; latest_checkpoint still finds it
        raise checkpoint_write_error(
            error, out_dir, f"the 'latest' pointer to {final.name}"
        ) from error
    return final


def _os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind a failed write. Writers wrap it: torch raises a RuntimeError whose
    context is the file object's OSError, safetensors a SafetensorError saying
    ``I/O error: ... (os error 28)``."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        match = _OS_ERROR_RE.search(str(seen))
        if match is not None:
            code = int(match.group(1))
            return OSError(code, os.strerror(code))
        seen = seen.__cause__ or seen.__context__
    return None


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

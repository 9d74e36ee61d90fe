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
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "CHECKPOINTS_DIR",
    "capture_rng_state",
    "checkpoint_name",
    "latest_checkpoint",
    "load_trainer_state",
    "restore_rng_state",
    "save_checkpoint",
]

CHECKPOINTS_DIR = "checkpoints"
LATEST = "latest"
POLICY_DIR = "policy"
STATE_FILE = "trainer_state.pt"
CONFIG_FILE = "config.json"


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


# -- RNG state as weights_only-safe containers ----------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy (legacy global) and torch CPU generator states, without numpy objects."""
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np_state["key"].numpy().astype(np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])


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
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(final.name + "\n")
    with open(pointer) as f:  # make the pointer durable before it becomes visible
        os.fsync(f.fileno())
    os.replace(pointer, root / LATEST)
    return final


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None when there is none."""
    pointer = Path(out_dir) / CHECKPOINTS_DIR / LATEST
    if not pointer.is_file():
        return None
    folder = pointer.parent / pointer.read_text().strip()
    if not (folder / STATE_FILE).is_file():
        raise FileNotFoundError(f"{pointer} names {folder.name}, which is incomplete or missing")
    return folder


def load_trainer_state(checkpoint: str | Path) -> dict[str, Any]:
    """The ``trainer_state.pt`` of a checkpoint, read with ``weights_only=True``."""
    return torch.load(Path(checkpoint) / STATE_FILE, weights_only=True, map_location="cpu")


def policy_dir(checkpoint: str | Path) -> Path:
    return Path(checkpoint) / POLICY_DIR

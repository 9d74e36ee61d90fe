"""What every trainer's checkpoints share: the folder layout, the ``latest`` pointer, and RNG
states stored so that ``torch.load(weights_only=True)`` can read them back.

Layout: ``<out>/checkpoints/step-XXXXXX/`` (each written under a temporary name and renamed
into place, so a step folder only ever appears complete) and ``<out>/checkpoints/latest``,
a one-line pointer replaced atomically last.
"""

from __future__ import annotations

import errno
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.common.files import atomic_write

CHECKPOINTS_DIR = "checkpoints"
LATEST = "latest"
STATE_FILE = "trainer_state.pt"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (full disk, quota, read-only folder, ...).

    Keeps the ``errno`` of the failed write; the message names the folder, says which
    checkpoint is still intact and what to do. Nothing half-written is left behind.
    """


def checkpoint_write_error(error: OSError, out_dir: str | Path, what: str) -> CheckpointWriteError:
    """A :class:`CheckpointWriteError` explaining ``error`` raised while writing ``what``."""
    root = Path(out_dir) / CHECKPOINTS_DIR
    previous = latest_checkpoint(out_dir)
    kept = (
        f"the previous checkpoint {previous} is intact"
        if previous is not None
        else "there is no earlier complete checkpoint"
    )
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        cause, fix = "the disk is full", f"free space on the disk that holds {root}"
    else:
        cause = error.strerror or type(error).__name__
        fix = f"make {root} writable"
    message = (
        f"could not write {what} under {root}: {cause} ({error}). Training stopped; {kept}. "
        f"To continue, {fix} (or move the run folder to a larger disk) and run again with "
        "resume: it continues from the last complete checkpoint."
    )
    wrapped = CheckpointWriteError(error.errno or errno.EIO, message)
    wrapped.folder = root  # type: ignore[attr-defined]
    return wrapped


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, text)


def point_latest(out_dir: str | Path, checkpoint: Path) -> None:
    atomic_write_text(Path(out_dir) / CHECKPOINTS_DIR / LATEST, checkpoint.name + "\n")


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None.

    A crash between renaming a finished checkpoint into place and updating the pointer leaves
    a complete ``step-*`` newer than the pointer; step folders only ever appear complete, so
    the newest one wins.
    """
    root = Path(out_dir) / CHECKPOINTS_DIR
    candidates = sorted(p for p in root.glob("step-*") if (p / STATE_FILE).is_file())
    pointer = root / LATEST
    if pointer.is_file():
        named = root / pointer.read_text().strip()
        if (named / STATE_FILE).is_file() and (not candidates or named.name >= candidates[-1].name):
            return named
    return candidates[-1] if candidates else None


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy (legacy global) and torch generator states, as plain containers."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
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
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


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
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

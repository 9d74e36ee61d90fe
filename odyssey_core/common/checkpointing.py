"""What every trainer's checkpoints store beside the weights: RNG states, kept so that
``torch.load(weights_only=True)`` can read them back. The folder layout, the ``latest``
pointer and the write errors are :mod:`odyssey_core.common.run_folder`'s (it needs no torch).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["capture_rng_state", "restore_rng_state"]


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

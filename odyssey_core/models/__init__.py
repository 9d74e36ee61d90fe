"""The policy models: a tiny offline Qwen3-VL, local checkpoint loading, and LoRA.

Nothing here ever downloads: checkpoints are local folders, and importing this package sets
``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` (unless already set). Names are imported lazily so
that ``import odyssey_core.models`` (e.g. by the CLI) does not pull in transformers.
Importing ``odyssey_core.models.processor`` registers :class:`OdysseyVLProcessor` with
``AutoProcessor``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_EXPORTS = {
    "build_tiny_model": "odyssey_core.models.tiny",
    "build_tiny_tokenizer": "odyssey_core.models.tiny",
    "CheckpointError": "odyssey_core.models.loading",
    "ModelConfig": "odyssey_core.models.loading",
    "check_checkpoint": "odyssey_core.models.loading",
    "load_model": "odyssey_core.models.loading",
    "load_processor": "odyssey_core.models.loading",
    "OdysseyVLProcessor": "odyssey_core.models.processor",
    "prepare_frame": "odyssey_core.models.processor",
    "LoraSettings": "odyssey_core.models.lora",
    "apply_lora": "odyssey_core.models.lora",
    "load_adapter": "odyssey_core.models.lora",
    "merge_and_save": "odyssey_core.models.lora",
    "save_adapter": "odyssey_core.models.lora",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # cache: the next access skips this hook
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)

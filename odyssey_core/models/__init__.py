"""The policy models: a tiny offline Qwen3-VL, local checkpoint loading, and LoRA.

Nothing here ever downloads: checkpoints are local folders, and importing this package sets
``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` (unless already set). Names are imported lazily so
that ``import odyssey_core.models`` (e.g. by the CLI) does not pull in transformers.

After ``import odyssey_core.models``, ``AutoProcessor.from_pretrained(folder)`` returns a
working Qwen-VL processor for the tiny model and for real checkpoints: the stock class where
torchvision is installed, :class:`OdysseyVLProcessor` where it is not. The registration that
makes the second case work (:mod:`odyssey_core.models.processor`) runs as soon as
``AutoProcessor``'s module is imported, whichever comes first, so this package still does not
import transformers itself.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import wrapt

from odyssey_core.common.lazy import lazy_exports

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _register_processor(_processing_auto: ModuleType) -> None:
    importlib.import_module("odyssey_core.models.processor")  # registers on import


wrapt.register_post_import_hook(_register_processor, "transformers.models.auto.processing_auto")

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
    "has_torchvision": "odyssey_core.models.processor",
    "LoraSettings": "odyssey_core.models.lora",
    "apply_lora": "odyssey_core.models.lora",
    "load_adapter": "odyssey_core.models.lora",
    "merge_and_save": "odyssey_core.models.lora",
    "save_adapter": "odyssey_core.models.lora",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

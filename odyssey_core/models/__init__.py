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

_LAZY = lazy_exports(
    __name__,
    {
        "odyssey_core.models.tiny": ("build_tiny_model", "build_tiny_tokenizer"),
        "odyssey_core.models.loading": (
            "CheckpointError",
            "ModelConfig",
            "check_checkpoint",
            "load_model",
            "load_processor",
        ),
        "odyssey_core.models.processor": ("OdysseyVLProcessor", "prepare_frame", "has_torchvision"),
        "odyssey_core.models.lora": (
            "LoraSettings",
            "apply_lora",
            "load_adapter",
            "merge_and_save",
            "save_adapter",
        ),
    },
)

__all__ = _LAZY.names
__getattr__, __dir__ = _LAZY.getattr, _LAZY.dir

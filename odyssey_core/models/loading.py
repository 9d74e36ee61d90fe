"""Load a Qwen-VL checkpoint and its processor from a local folder, never from a hub.

A checkpoint folder is what ``save_pretrained`` writes (and what ``huggingface-cli download``
or ``git clone`` of a model repository gives you): ``config.json``, the weights as
``*.safetensors`` (one file or shards plus ``model.safetensors.index.json``), the tokenizer
(``tokenizer.json`` or ``vocab.json`` + ``merges.txt``, with ``tokenizer_config.json``) and the
image-processor settings (``preprocessor_config.json`` or ``processor_config.json``). The model
class is picked from ``config.json``'s ``model_type``, so Qwen3-VL and Qwen2.5-VL folders load
through the same functions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from odyssey_core.config import StrictModel

__all__ = [
    "MODEL_CLASSES",
    "CheckpointError",
    "ModelConfig",
    "check_checkpoint",
    "load_model",
    "load_processor",
    "resolve_dtype",
]

DTypeName = Literal["float32", "bfloat16", "float16", "auto"]

# config.json model_type -> the transformers class that reads the checkpoint.
MODEL_CLASSES: dict[str, str] = {
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
}


class ModelConfig(StrictModel):
    """Which checkpoint the policy runs and how frames are prepared for it."""

    path: Path = Field(
        description="local checkpoint folder (e.g. one made by `odyssey model init-tiny`)"
    )
    dtype: DTypeName = "float32"
    device: str = "cpu"
    image_scale: int | None = Field(
        default=None, ge=1, description="integer nearest-neighbour upsampling of frames (paper: 8)"
    )
    image_size: tuple[int, int] | None = Field(
        default=None, description="explicit (width, height) for frames instead of image_scale"
    )
    attn_implementation: str = Field(
        default="sdpa", description="'sdpa', 'eager' or 'flash_attention_2'"
    )


class CheckpointError(FileNotFoundError):
    """A checkpoint folder is missing or lacks a file the loader needs."""


def _offline() -> None:
    # Belt and braces next to local_files_only=True: nothing in this process may reach a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _require_folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint folder {str(folder)!r} does not exist; models are loaded from local "
            "folders only (create a tiny one with `odyssey model init-tiny DIR`)"
        )
    return folder


def check_checkpoint(path: str | Path, *, model: bool = True, processor: bool = True) -> Path:
    """Raise :class:`CheckpointError` naming every file a load would miss; return the folder."""
    folder = _require_folder(path)
    missing: list[str] = []
    if model:
        if not (folder / "config.json").is_file():
            missing.append("config.json")
        if not any(folder.glob("*.safetensors")):
            missing.append("model weights (*.safetensors)")
        index = folder / "model.safetensors.index.json"
        if index.is_file():  # a sharded checkpoint must have every shard it lists
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            missing.extend(s for s in shards if not (folder / s).is_file())
    if processor:
        has_fast = (folder / "tokenizer.json").is_file()
        has_bpe = (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()
        if not (has_fast or has_bpe):
            missing.append("tokenizer files (tokenizer.json, or vocab.json + merges.txt)")
        if not (folder / "tokenizer_config.json").is_file():
            missing.append("tokenizer_config.json")
        if not _has_image_processor_config(folder):
            missing.append(
                "preprocessor config (preprocessor_config.json or processor_config.json)"
            )
    if missing:
        raise CheckpointError(
            f"checkpoint {str(folder)!r} is incomplete; missing: {', '.join(missing)}"
        )
    return folder


def _has_image_processor_config(folder: Path) -> bool:
    if (folder / "preprocessor_config.json").is_file():
        return True
    processor_file = folder / "processor_config.json"
    if processor_file.is_file():
        return "image_processor" in json.loads(processor_file.read_text())
    return False


def resolve_dtype(dtype: str | Any) -> Any:
    """``"float32"``/``"bfloat16"``/``"float16"`` -> torch dtype; ``"auto"`` stays a string."""
    import torch

    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            dtype
        ]
    except KeyError:
        raise ValueError(
            f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or auto"
        ) from None


def load_model(
    path: str | Path,
    dtype: str = "float32",
    device: str = "cpu",
    attn_implementation: str | None = "sdpa",
) -> Any:
    """Load a Qwen-VL model for conditional generation from a local folder, in eval mode."""
    _offline()
    import transformers

    folder = check_checkpoint(path, processor=False)
    model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    if model_type not in MODEL_CLASSES:
        known = ", ".join(sorted(MODEL_CLASSES))
        raise ValueError(f"{str(folder)!r}: unsupported model_type {model_type!r}; known: {known}")
    model_class = getattr(transformers, MODEL_CLASSES[model_type])
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(dtype), "local_files_only": True}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    model = model_class.from_pretrained(folder, **kwargs)
    return model.to(device).eval()


def load_processor(path: str | Path) -> Any:
    """Load the image+text processor of a local checkpoint.

    Where torchvision is installed and the folder names a stock Qwen-VL processor (the tiny
    model does, and real checkpoints do), the stock class, as transformers and vLLM build it;
    otherwise :class:`~odyssey_core.models.processor.OdysseyVLProcessor`, the same processor
    without its video part (whose processor needs torchvision), whatever the folder names.
    """
    _offline()
    from odyssey_core.models.processor import (
        OdysseyVLProcessor,
        has_torchvision,
        names_stock_processor,
    )

    folder = check_checkpoint(path, model=False)
    if has_torchvision() and names_stock_processor(folder):
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(folder, local_files_only=True)
    return OdysseyVLProcessor.from_pretrained(folder, local_files_only=True)

"""Qwen-VL processors: the stock class where torchvision is installed, an image-only one where
it is not.

transformers 5.x builds ``Qwen3VLProcessor`` / ``Qwen2_5_VLProcessor`` with a video processor,
and every video processor imports torchvision, which cannot be installed beside our pinned CPU
torch. Odyssey only ever sends still frames, so :class:`OdysseyVLProcessor` is the Qwen-VL
processor minus its video part, with the PIL/numpy image processor
(``Qwen2VLImageProcessorPil``; the default "fast" one is torchvision-based too).

Folders are always written in the stock layout, so transformers, vLLM and ``odyssey serve``
read them on any machine with torchvision: :meth:`OdysseyVLProcessor.save_pretrained` names
the stock processor class (``Qwen3VLProcessor``, or ``Qwen2_5_VLProcessor`` for a Qwen2.5-VL
``config.json`` beside it) in ``processor_config.json`` and ``tokenizer_config.json``, with a
video processor config next to the image processor's. Which class reads a folder back:

- :func:`odyssey_core.models.load_processor` (what Odyssey itself uses) returns the stock class
  where torchvision is installed (the same pixels vLLM computes) and this class where not.
- ``AutoProcessor.from_pretrained`` after ``import odyssey_core.models``: the stock class where
  torchvision is installed (nothing is changed then); where it is missing, importing
  ``AutoProcessor``'s module registers this class for the Qwen-VL configs and for the stock
  Qwen-VL processor names, which otherwise fail on their torchvision-only video processor.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import transformers.models.auto.processing_auto as processing_auto
from PIL import Image
from transformers import (
    AutoProcessor,
    Qwen2_5_VLConfig,
    Qwen2VLImageProcessorPil,
    Qwen3VLConfig,
    Qwen3VLMoeConfig,
)
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.utils import is_torchvision_available

__all__ = [
    "STOCK_CLASSES",
    "OdysseyVLProcessor",
    "has_torchvision",
    "make_image_processor",
    "names_stock_processor",
    "prepare_frame",
    "write_stock_processor_config",
]

#: config.json model_type -> (the stock processor class, its video processor class)
STOCK_CLASSES: dict[str, tuple[str, str]] = {
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
    "qwen3_vl_moe": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor"),
}
_STOCK_PROCESSORS = frozenset(name for name, _ in STOCK_CLASSES.values())
# image processor settings a Qwen-VL video processor shares
_VIDEO_KEYS = (
    "do_convert_rgb",
    "do_normalize",
    "do_rescale",
    "do_resize",
    "image_mean",
    "image_std",
    "merge_size",
    "patch_size",
    "resample",
    "rescale_factor",
    "size",
    "temporal_patch_size",
)


def has_torchvision() -> bool:
    """Whether transformers can use torchvision here (and so build the stock processors)."""
    return bool(is_torchvision_available())


class OdysseyVLProcessor(Qwen3VLProcessor):
    """Qwen-VL processor for images and text only (no video processor, no torchvision).

    The image placeholder expansion (one ``<|image_pad|>`` per merged patch) is the same for
    Qwen2.5-VL and Qwen3-VL, so one class serves both families.
    """

    # ProcessorMixin derives its sub-processors from this signature: no video_processor here.
    def __init__(
        self,
        image_processor: Any = None,
        tokenizer: Any = None,
        chat_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=None,
            chat_template=chat_template,
            **kwargs,
        )

    @property
    def model_input_names(self) -> list[str]:
        names = list(self.tokenizer.model_input_names) + list(
            self.image_processor.model_input_names
        )
        return [*dict.fromkeys(names), "mm_token_type_ids"]

    def save_pretrained(self, save_directory: str | Path, *args: Any, **kwargs: Any) -> Any:
        """Save in the stock layout (see :func:`write_stock_processor_config`)."""
        saved = super().save_pretrained(save_directory, *args, **kwargs)
        write_stock_processor_config(save_directory)
        return saved


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_stock_processor_config(folder: str | Path) -> None:
    """Rewrite a saved processor folder to name the stock classes that transformers and vLLM
    know: ``processor_class`` in ``processor_config.json`` and ``tokenizer_config.json``, and
    a ``video_processor`` config (the image processor's patch, merge, size and normalisation
    settings) beside the ``image_processor`` one. The family comes from the ``config.json``
    in the folder (the model is saved first); without one, Qwen3-VL."""
    folder = Path(folder)
    model_type = _read_json(folder / "config.json").get("model_type", "qwen3_vl")
    processor_class, video_class = STOCK_CLASSES.get(model_type, STOCK_CLASSES["qwen3_vl"])
    config = _read_json(folder / "processor_config.json")
    image = config.get("image_processor", {})
    config["processor_class"] = processor_class
    config["video_processor"] = {
        **{k: image[k] for k in _VIDEO_KEYS if k in image},
        "video_processor_type": video_class,
    }
    _write_json(folder / "processor_config.json", config)
    tokenizer_config = folder / "tokenizer_config.json"
    if tokenizer_config.is_file():
        _write_json(
            tokenizer_config, {**_read_json(tokenizer_config), "processor_class": processor_class}
        )


def names_stock_processor(folder: str | Path) -> bool:
    """Whether the folder's processor files name a stock Qwen-VL processor class."""
    folder = Path(folder)
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        named = _read_json(folder / name).get("processor_class")
        if named is not None:
            return named in _STOCK_PROCESSORS
    return False


def make_image_processor(
    patch_size: int = 16,
    merge_size: int = 2,
    min_pixels: int = 64 * 32 * 32,
    max_pixels: int = 16384 * 32 * 32,
    temporal_patch_size: int = 2,
) -> Qwen2VLImageProcessorPil:
    """The PIL/numpy Qwen-VL image processor, with Qwen3-VL's normalisation by default."""
    return Qwen2VLImageProcessorPil(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=temporal_patch_size,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )


def prepare_frame(
    image: np.ndarray | Image.Image,
    image_scale: int | None = None,
    image_size: tuple[int, int] | None = None,
) -> Image.Image:
    """Resize a game frame before the processor sees it.

    ``image_scale`` upsamples by an integer factor with nearest-neighbour (the paper feeds Game
    Boy frames at x8 so each pixel spans whole vision patches); ``image_size`` is an explicit
    ``(width, height)`` target instead. With neither, the frame is passed through unchanged
    (the processor still snaps it to a multiple of patch x merge size).
    """
    if image_scale is not None and image_size is not None:
        raise ValueError("give image_scale or image_size, not both")
    pil = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
    pil = pil.convert("RGB")
    if image_scale is not None:
        if int(image_scale) != image_scale or image_scale < 1:
            raise ValueError(f"image_scale must be a positive integer, got {image_scale!r}")
        if image_scale > 1:
            pil = pil.resize((pil.width * image_scale, pil.height * image_scale), Image.NEAREST)
    elif image_size is not None:
        width, height = image_size
        if (width, height) != pil.size:
            pil = pil.resize((int(width), int(height)), Image.NEAREST)
    return pil


def _resolve_stock_names(original: Callable[[str], Any]) -> Callable[[str], Any]:
    def processor_class_from_name(class_name: str) -> Any:
        if class_name in _STOCK_PROCESSORS:
            return OdysseyVLProcessor
        return original(class_name)

    processor_class_from_name.resolves_stock_names = True  # type: ignore[attr-defined]
    return processor_class_from_name


def _register() -> None:
    # Where torchvision is missing, the stock Qwen-VL processors cannot be built at all (their
    # video processor needs it): let AutoProcessor answer with this class instead, both for
    # folders that name a stock class and for Qwen-VL configs that name none. AutoProcessor
    # resolves a named class before any registration, hence the name resolver too.
    if has_torchvision():
        return
    for config_class in (Qwen3VLConfig, Qwen3VLMoeConfig, Qwen2_5_VLConfig):
        AutoProcessor.register(config_class, OdysseyVLProcessor, exist_ok=True)
    resolver = processing_auto.processor_class_from_name
    if not getattr(resolver, "resolves_stock_names", False):
        processing_auto.processor_class_from_name = _resolve_stock_names(resolver)


_register()

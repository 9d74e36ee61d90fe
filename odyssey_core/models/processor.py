"""An image-and-text processor for Qwen-VL checkpoints that needs no torchvision.

transformers 5.x builds ``Qwen3VLProcessor`` / ``Qwen2_5_VLProcessor`` with a video processor,
and every video processor imports torchvision, which cannot be installed beside our pinned
torch. Odyssey only ever sends still frames, so :class:`OdysseyVLProcessor` is the Qwen-VL
processor minus its video part, with the PIL/numpy image processor
(``Qwen2VLImageProcessorPil``; the default "fast" one is torchvision-based too).

It is registered with ``AutoProcessor`` for the Qwen-VL config types, and folders written by
``save_pretrained`` name it in ``processor_config.json``, so after ``import odyssey_core.models``
``AutoProcessor.from_pretrained(tiny_dir)`` returns it. Real checkpoints name
``Qwen3VLProcessor`` in their processor files, which ``AutoProcessor`` would honour (and then
fail on the video processor): load those with :func:`odyssey_core.models.load_processor`,
which always goes through this class.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image
from transformers import AutoProcessor, Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

__all__ = ["OdysseyVLProcessor", "make_image_processor", "prepare_frame"]


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


def _register() -> None:
    # Make AutoProcessor pick our class for Qwen-VL configs and for folders that name it.
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    for config_class in (Qwen3VLConfig, Qwen2_5_VLConfig):
        AutoProcessor.register(config_class, OdysseyVLProcessor, exist_ok=True)


_register()

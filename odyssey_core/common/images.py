"""The Pillow pieces every drawer and every frame writer shares: one PNG codec and one font
loader.

PNG is the one lossless encoding frames travel in (datasets, DAgger buffers, data URLs, the
pyfunc ``image`` column). :func:`encode_png` gives the same bytes for the same pixels (Pillow's
default zlib level, no metadata chunks), so hashes of encoded frames name their content.

:func:`load_font` returns a TrueType face from ``faces`` when one is installed, else the font
Pillow bundles (``ImageFont.load_default(size=...)``, Pillow >= 10.1), which is the same
everywhere; a drawer that must give the same pixels on every machine names no faces.
"""

from __future__ import annotations

import functools
import io
from typing import TypeAlias

import numpy as np
from PIL import Image, ImageFont

__all__ = ["Font", "decode_image", "encode_png", "load_font"]

Font: TypeAlias = ImageFont.FreeTypeFont | ImageFont.ImageFont


def encode_png(image: np.ndarray | Image.Image) -> bytes:
    """``image`` (``uint8[H, W, 3]`` or a PIL image of any mode) as RGB PNG bytes."""
    if not isinstance(image, Image.Image):
        image = Image.fromarray(np.asarray(image, dtype=np.uint8))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def decode_image(data: bytes | bytearray) -> np.ndarray:
    """Encoded image bytes (PNG, or any format Pillow reads) as a writable ``uint8[H, W, 3]``
    RGB array."""
    with Image.open(io.BytesIO(data)) as image:
        return np.array(image.convert("RGB"), dtype=np.uint8)


@functools.lru_cache(maxsize=64)
def load_font(size: int, faces: tuple[str, ...] = ()) -> Font:
    """The first of ``faces`` (TrueType file names, looked up on the system's font path)
    that loads, at ``size`` pixels; else Pillow's bundled font at that size."""
    if size < 1:
        raise ValueError(f"a font size is a positive number of pixels, got {size}")
    for face in faces:
        try:
            return ImageFont.truetype(face, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)

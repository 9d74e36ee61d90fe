"""Images sent inline as data URLs: their size is read from the header and checked before a
single pixel is decoded, so a small compressed file cannot expand into gigabytes.

Only still-image formats a browser or Pillow writes are accepted (PNG, JPEG, WebP, GIF; the
first frame of an animation). Remote ``http(s)`` URLs are refused: the server is offline and
never fetches them. Call :func:`decode_data_url` off the event loop (it decodes).
"""

from __future__ import annotations

import base64
import binascii
import io

from PIL import Image

from odyssey_core.serve.errors import APIError
from odyssey_core.serve.limits import MAX_ASPECT_RATIO

__all__ = ["IMAGE_FORMATS", "decode_data_url", "open_data_url"]

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")


def open_data_url(url: str, param: str, max_pixels: int) -> Image.Image:
    """The image in a ``data:image/...;base64,...`` URL, opened but not decoded, after its
    header passed the checks: a known format, at most ``max_pixels`` pixels, an aspect ratio
    of at most :data:`MAX_ASPECT_RATIO`. Anything else is a 400 :class:`APIError`."""
    if url.startswith(("http://", "https://")):
        raise APIError(
            400,
            "remote image URLs are not supported: this server is offline and never fetches "
            "them. Send the image inline as a data URL (data:image/png;base64,...).",
            param=param,
            code="remote_image_url",
        )
    header, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep or ";base64" not in header:
        raise APIError(
            400, "image_url must be a base64 data URL (data:image/png;base64,...)", param=param
        )
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(
            400, "the image data URL is not valid base64", param=param, code="invalid_image"
        ) from None
    try:
        image = Image.open(io.BytesIO(raw), formats=IMAGE_FORMATS)
    except Image.DecompressionBombError:  # Pillow's own ceiling, far above ours
        raise _too_many_pixels(param, max_pixels, None) from None
    except Exception:  # Pillow raises many types for bytes that are no image
        raise APIError(
            400,
            f"the image data URL holds no {', '.join(IMAGE_FORMATS)} image",
            param=param,
            code="invalid_image",
        ) from None
    width, height = image.size
    if width < 1 or height < 1:
        raise APIError(400, "the image is empty (0 pixels)", param=param, code="invalid_image")
    if width * height > max_pixels:
        raise _too_many_pixels(param, max_pixels, (width, height))
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise APIError(
            400,
            f"the image is {width}x{height} pixels: its aspect ratio is more than "
            f"{MAX_ASPECT_RATIO}:1, which the model's image processor cannot take; crop or pad "
            "it",
            param=param,
            code="image_aspect_ratio",
        )
    return image


def decode_data_url(url: str, param: str, max_pixels: int) -> Image.Image:
    """The RGB pixels of a data URL's image (see :func:`open_data_url` for the checks made
    before decoding)."""
    image = open_data_url(url, param, max_pixels)
    try:
        image.load()
        return image.convert("RGB")
    except Exception:  # truncated or corrupt data behind a valid header
        raise APIError(
            400,
            f"could not decode the {image.format} image: its data is truncated or corrupt",
            param=param,
            code="invalid_image",
        ) from None


def _too_many_pixels(param: str, max_pixels: int, size: tuple[int, int] | None) -> APIError:
    what = "the image has" if size is None else f"the image is {size[0]}x{size[1]} pixels,"
    return APIError(
        400,
        f"{what} more than this server's {max_pixels} pixels per image "
        "(odyssey serve --max-image-pixels); send it smaller",
        param=param,
        code="image_too_large",
    )

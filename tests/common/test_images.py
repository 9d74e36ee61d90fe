"""The one PNG codec and the one font loader."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFont

from odyssey_core.common.images import decode_image, encode_png, load_font


def _frame(seed: int = 0, shape: tuple[int, int, int] = (37, 51, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _chunks(png: bytes) -> list[bytes]:
    kinds, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kinds.append(png[at + 4 : at + 8])
        at += 12 + length
    return kinds


def test_a_frame_survives_the_round_trip_exactly() -> None:
    frame = _frame()
    decoded = decode_image(encode_png(frame))
    assert decoded.dtype == np.uint8 and decoded.shape == frame.shape
    np.testing.assert_array_equal(decoded, frame)
    decoded[0, 0] = 0  # writable: callers may draw on it


def test_the_same_pixels_give_the_same_bytes_and_nothing_but_pixels() -> None:
    frame = _frame(1)
    png = encode_png(frame)
    assert png == encode_png(frame.copy()) == encode_png(Image.fromarray(frame))
    assert png != encode_png(_frame(2))
    assert _chunks(png) == [b"IHDR", b"IDAT", b"IEND"]  # no time or text chunks
    width, height, depth, colour = struct.unpack(">IIBB", png[16:26])
    assert (width, height, depth, colour) == (51, 37, 8, 2)  # 8-bit RGB


def test_other_modes_are_stored_as_rgb() -> None:
    rgba = np.dstack([_frame(3), np.full((37, 51), 128, np.uint8)])
    decoded = decode_image(encode_png(Image.fromarray(rgba, "RGBA")))
    np.testing.assert_array_equal(decoded, rgba[..., :3])
    grey = np.arange(37 * 51, dtype=np.uint8).reshape(37, 51)
    assert decode_image(encode_png(grey)).shape == (37, 51, 3)


def test_decoding_what_is_not_an_image_fails() -> None:
    with pytest.raises(OSError, match="cannot identify image"):
        decode_image(zlib.compress(b"not an image"))


def test_an_unknown_face_falls_back_to_the_bundled_font_at_the_size_asked() -> None:
    font = load_font(17, ("No Such Face.ttf",))
    bundled = ImageFont.load_default(size=17)
    assert isinstance(font, ImageFont.FreeTypeFont) and font.size == 17
    assert font.getname() == bundled.getname()
    assert load_font(17) is load_font(17)  # loaded once per size and faces


def test_the_first_installed_face_is_used() -> None:
    try:
        wanted = ImageFont.truetype("DejaVuSans.ttf", 12)
    except OSError:
        pytest.skip("DejaVu Sans is not installed on this machine")
    font = load_font(12, ("No Such Face.ttf", "DejaVuSans.ttf"))
    assert isinstance(font, ImageFont.FreeTypeFont) and font.getname() == wanted.getname()


def test_a_size_below_one_pixel_is_refused() -> None:
    with pytest.raises(ValueError, match="positive number of pixels, got 0"):
        load_font(0)

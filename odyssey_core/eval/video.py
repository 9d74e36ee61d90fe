"""Episode videos: each frame upscaled, with the turn's details written in a panel beside it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import imageio.v2 as imageio
import numpy as np
from PIL import Image, ImageDraw

from odyssey_core.common.images import load_font

PANEL_BACKGROUND = (24, 24, 32)
PANEL_TEXT = (235, 235, 235)
# H.264 encoders want sizes divisible by 16; frames are padded to that instead of resized.
MACRO_BLOCK = 16


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class EpisodeVideoWriter:
    """Writes an MP4 (imageio's ffmpeg plugin) of annotated frames.

    >>> with EpisodeVideoWriter("out.mp4") as video:
    ...     video.add(frame, ["turn 1", "buttons: right", "progress: 24"])
    """

    def __init__(
        self,
        path: str | Path,
        *,
        fps: float = 8.0,
        scale: int = 3,
        panel_width: int = 240,
        font_size: int = 16,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.scale = scale
        self.panel_width = panel_width
        self.font = load_font(font_size)
        self.line_height = font_size + 4
        self.frames_written = 0
        self._writer = imageio.get_writer(
            self.path, fps=fps, codec="libx264", macro_block_size=1, quality=7
        )

    def compose(self, frame: np.ndarray, lines: Sequence[str]) -> np.ndarray:
        """The upscaled frame with a text panel on its right, padded to whole macro blocks."""
        height, width = frame.shape[:2]
        big = np.repeat(np.repeat(frame, self.scale, axis=0), self.scale, axis=1)
        out_h = _round_up(height * self.scale, MACRO_BLOCK)
        out_w = _round_up(width * self.scale + self.panel_width, MACRO_BLOCK)
        canvas = Image.new("RGB", (out_w, out_h), PANEL_BACKGROUND)
        canvas.paste(Image.fromarray(big), (0, 0))
        draw = ImageDraw.Draw(canvas)
        x = width * self.scale + 10
        for row, line in enumerate(lines):
            draw.text((x, 10 + row * self.line_height), line, fill=PANEL_TEXT, font=self.font)
        return np.asarray(canvas)

    def add(self, frame: np.ndarray, lines: Sequence[str] = ()) -> None:
        self._writer.append_data(self.compose(frame, lines))
        self.frames_written += 1

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> EpisodeVideoWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

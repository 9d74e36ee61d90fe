"""Drawing a :class:`~odyssey_core.envs.persona.screen.Screen` as pixels.

A :class:`Renderer` turns a screen into ``uint8[H, W, 3]``. :class:`FastRenderer` paints with
Pillow and the font Pillow bundles (``ImageFont.load_default(size=...)``), so no system font
is looked up. Each element is painted on its own tile (its box, borders included) and pasted
back, so nothing an element draws leaves its box; elements are painted in list order, later
over earlier. Styles go by role: a selected element (a chosen chip or day, the focused field)
is drawn filled; a field shows its value, or its label greyed when empty. The same screen
gives byte-identical pixels.

Where an element's text goes is :func:`layout_text`: the font size, the lines (a paragraph or
a result row word-wrapped to the box, every other role on one line; lines that do not fit
dropped, a line too wide cut with "..."), and their places. It is data, so the browser
renderer draws the same lines and the parity check compares what both show
(:meth:`FastRenderer.shown_text`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from PIL import Image, ImageDraw

from odyssey_core.common.images import Font, load_font
from odyssey_core.envs.persona.screen import Element, Screen

__all__ = [
    "BACKGROUND",
    "ROLE_STYLES",
    "WRAPPED_ROLES",
    "FastRenderer",
    "Renderer",
    "RoleStyle",
    "TextLayout",
    "bundled_font_bytes",
    "layout_text",
    "shown_source",
]

RGB = tuple[int, int, int]
BACKGROUND: RGB = (243, 244, 246)
BLUE: RGB = (37, 99, 235)
WHITE: RGB = (255, 255, 255)
MIN_FONT = 8


class Renderer(Protocol):
    """Anything that draws a screen: ``render(screen) -> uint8[screen.height, screen.width, 3]``."""

    def render(self, screen: Screen) -> np.ndarray: ...


@dataclass(frozen=True)
class RoleStyle:
    fill: RGB | None  # None: transparent
    outline: RGB | None
    text: RGB
    font: int  # font size in pixels on a 448-pixel-wide screen
    centered: bool = False
    selected_fill: RGB | None = None  # how a selected element looks
    selected_text: RGB | None = None
    rounded: bool = True


ROLE_STYLES: dict[str, RoleStyle] = {
    "status_bar": RoleStyle((31, 41, 55), None, WHITE, 13, rounded=False),
    "title": RoleStyle(None, None, (17, 24, 39), 22),
    "text": RoleStyle(None, None, (55, 65, 81), 15),
    "button": RoleStyle((219, 234, 254), BLUE, (29, 78, 216), 16, True, BLUE, WHITE),
    "field": RoleStyle(WHITE, (156, 163, 175), (17, 24, 39), 16, selected_fill=(239, 246, 255)),
    "date": RoleStyle(WHITE, (156, 163, 175), (17, 24, 39), 16, True, BLUE, WHITE),
    "list_item": RoleStyle(WHITE, (209, 213, 219), (17, 24, 39), 16),
    "image": RoleStyle((191, 219, 254), None, WHITE, 14, rounded=False),
    "sheet": RoleStyle(WHITE, (156, 163, 175), (17, 24, 39), 16),
    "close": RoleStyle((229, 231, 235), (156, 163, 175), (55, 65, 81), 16, True),
}
PLACEHOLDER: RGB = (156, 163, 175)
SECONDARY: RGB = (75, 85, 99)
#: roles whose text is word-wrapped over several lines; every other role shows one line
WRAPPED_ROLES: frozenset[str] = frozenset({"text", "list_item"})


def _fit(text: str, font: Font, width: float) -> str:
    """``text`` cut with "..." to fit ``width`` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "...") > width:
        text = text[:-1]
    return text + "..." if text else ""


def _wrap(text: str, font: Font, width: float) -> list[str]:
    """Greedy word wrap of every paragraph of ``text`` to ``width`` pixels."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            candidate = f"{line} {word}".strip()
            if line and font.getlength(candidate) > width:
                lines.append(line)
                line = word
            else:
                line = candidate
        lines.append(line)
    return lines


def _image_fill(element: Element) -> RGB:
    """A stable pastel per picture, from its id and caption."""
    h = zlib.crc32(f"{element.id}|{element.text}".encode())
    return (150 + h % 80, 160 + (h >> 8) % 70, 170 + (h >> 16) % 60)


@dataclass(frozen=True)
class TextLayout:
    """Where one element's text goes, in pixels relative to its box's top-left corner: line
    ``k`` fills the band ``[top + k * line_height, top + (k + 1) * line_height)``, starts
    ``pad`` pixels in (or is centred on the box when ``centered``) and is drawn at ``size``
    pixels in the bundled font. ``placeholder``: the lines are an empty field's label."""

    lines: tuple[str, ...]
    size: int
    line_height: int
    pad: int
    top: int
    centered: bool
    placeholder: bool


def shown_source(element: Element) -> str:
    """The text an element shows before layout: a field's or day's value, else its label;
    a picture shows none."""
    return "" if element.role == "image" else element.value or element.text


def layout_text(element: Element, screen_width: int, font_scale: float = 1.0) -> TextLayout:
    """How ``element``'s text is laid out on a ``screen_width``-wide screen (fonts scale with
    the width; ``font_scale`` on top). The lines are exactly what gets drawn."""
    if font_scale <= 0:
        raise ValueError("font_scale must be positive")
    style = ROLE_STYLES[element.role]
    x0, y0, x1, y1 = element.box
    w, h = x1 - x0 + 1, y1 - y0 + 1
    scale = font_scale * screen_width / 448
    pad = max(2, round(8 * scale)) if element.role != "close" else 0
    size = max(MIN_FONT, min(round(style.font * scale), int(h * 0.7)))
    line_height = round(size * 1.3)
    text = shown_source(element)
    lines: list[str] = []
    if text:
        font = load_font(size)  # the bundled font: the same pixels everywhere
        lines = _wrap(text, font, w - 2 * pad) if element.role in WRAPPED_ROLES else [text]
        lines = lines[: max(1, h // line_height)]
        lines = [_fit(line, font, w - 2 * pad) for line in lines]
    return TextLayout(
        lines=tuple(lines),
        size=size,
        line_height=line_height,
        pad=pad,
        top=(h - line_height * len(lines)) // 2,
        centered=style.centered,
        placeholder=element.role in ("field", "date") and not element.value,
    )


def bundled_font_bytes() -> bytes:
    """The TrueType bytes of the font the Pillow renderer draws with (Pillow's bundled
    Aileron), so another renderer can draw the same glyphs."""
    font = load_font(MIN_FONT)
    data = getattr(font, "font_bytes", None)
    if not isinstance(data, bytes) or not data:
        raise RuntimeError(
            f"Pillow's bundled font ({type(font).__name__}) carries no TrueType bytes: "
            "install Pillow >= 10.1 with FreeType support"
        )
    return data


class FastRenderer:
    """The Pillow renderer; ``font_scale`` enlarges or shrinks every font."""

    def __init__(self, font_scale: float = 1.0) -> None:
        if font_scale <= 0:
            raise ValueError("font_scale must be positive")
        self.font_scale = font_scale

    def render(self, screen: Screen) -> np.ndarray:
        image = Image.new("RGB", (screen.width, screen.height), BACKGROUND)
        for element in screen:
            x0, y0, x1, y1 = element.box
            tile = image.crop((x0, y0, x1 + 1, y1 + 1))
            self._paint(tile, element, layout_text(element, screen.width, self.font_scale))
            image.paste(tile, (x0, y0))
        return np.asarray(image, dtype=np.uint8).copy()

    def shown_text(self, screen: Screen) -> dict[str, tuple[str, ...]]:
        """Per element id, the lines of text :meth:`render` draws in its box, top to bottom
        (empty for an element that shows none)."""
        return {e.id: layout_text(e, screen.width, self.font_scale).lines for e in screen}

    def _paint(self, tile: Image.Image, element: Element, layout: TextLayout) -> None:
        style = ROLE_STYLES[element.role]
        draw = ImageDraw.Draw(tile)
        w, h = tile.size
        fill, color = style.fill, style.text
        if element.selected and style.selected_fill is not None:
            fill, color = style.selected_fill, style.selected_text or color
        outline = BLUE if element.selected and element.role == "field" else style.outline
        if element.role == "image":
            fill = _image_fill(element)
        if fill is not None or outline is not None:
            radius = min(w, h) // 2 if element.role == "close" else min(w, h) // 6
            shape = (0, 0, w - 1, h - 1)
            border = 2 if element.selected and element.role == "field" else 1
            if style.rounded and radius > 1:
                draw.rounded_rectangle(shape, radius, fill=fill, outline=outline, width=border)
            else:
                draw.rectangle(shape, fill=fill, outline=outline, width=border if outline else 0)
        if element.role == "image":
            # a hill and a sun, so a picture reads as a picture
            draw.polygon([(0, h - 1), (w // 3, h // 2), (2 * w // 3, h - 1)], fill=(120, 160, 120))
            r = max(1, min(w, h) // 8)
            draw.ellipse((w - 3 * r, r, w - r, 3 * r), fill=(250, 204, 21))
        if layout.placeholder:
            color = PLACEHOLDER  # the label stands in for the empty value
        font = load_font(layout.size)
        for k, line in enumerate(layout.lines):
            y = layout.top + k * layout.line_height + layout.line_height // 2
            x, anchor = (w // 2, "mm") if layout.centered else (layout.pad, "lm")
            shade = SECONDARY if element.role == "list_item" and k > 0 else color
            draw.text((x, y), line, font=font, fill=shade, anchor=anchor)

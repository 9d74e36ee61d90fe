"""Draw playing cards and captions with Pillow (no image files).

Suits are drawn as shapes (so no font needs suit glyphs); ranks and captions use DejaVu Sans
when Pillow can find it and Pillow's built-in font otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from odyssey_core.common.images import Font, load_font

__all__ = ["RANKS", "SUITS", "Card", "card_value", "render_panels", "render_table"]

RANKS: tuple[str, ...] = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
SUITS: tuple[str, ...] = ("S", "H", "D", "C")  # spades, hearts, diamonds, clubs
_SUIT_NAMES = {"S": "spades", "H": "hearts", "D": "diamonds", "C": "clubs"}
_RED = (200, 30, 40)
_BLACK = (20, 20, 20)
_TABLE = (24, 110, 60)


@dataclass(frozen=True)
class Card:
    rank: str
    suit: str

    def __post_init__(self) -> None:
        if self.rank not in RANKS or self.suit not in SUITS:
            raise ValueError(f"bad card {self.rank!r}{self.suit!r}")

    def __str__(self) -> str:
        return f"{self.rank}{self.suit}"

    @property
    def name(self) -> str:
        return f"{self.rank} of {_SUIT_NAMES[self.suit]}"

    def as_dict(self) -> dict[str, str | int]:
        return {"rank": self.rank, "suit": self.suit, "value": card_value(self.rank)}


def card_value(rank: str) -> int:
    """The number a card stands for in the arithmetic games: A=1, J/Q/K=10."""
    if rank == "A":
        return 1
    if rank in ("J", "Q", "K"):
        return 10
    return int(rank)


_FACES = ("DejaVuSans-Bold.ttf", "DejaVuSans.ttf")


def _font(size: int) -> Font:
    return load_font(size, _FACES)


def _suit_shape(draw: ImageDraw.ImageDraw, suit: str, cx: float, cy: float, r: float) -> None:
    color = _RED if suit in ("H", "D") else _BLACK
    if suit == "D":
        draw.polygon([(cx, cy - r), (cx + 0.75 * r, cy), (cx, cy + r), (cx - 0.75 * r, cy)], color)
    elif suit == "H":
        lobe = 0.52 * r
        draw.ellipse((cx - 2 * lobe, cy - r, cx, cy - r + 2 * lobe), color)
        draw.ellipse((cx, cy - r, cx + 2 * lobe, cy - r + 2 * lobe), color)
        draw.polygon(
            [
                (cx - 1.95 * lobe, cy - r + 1.3 * lobe),
                (cx + 1.95 * lobe, cy - r + 1.3 * lobe),
                (cx, cy + r),
            ],
            color,
        )
    elif suit == "S":
        lobe = 0.5 * r
        draw.polygon(
            [(cx, cy - r), (cx + 2 * lobe, cy + 0.2 * r), (cx - 2 * lobe, cy + 0.2 * r)], color
        )
        draw.ellipse((cx - 2 * lobe, cy - 0.3 * r, cx, cy - 0.3 * r + 2 * lobe), color)
        draw.ellipse((cx, cy - 0.3 * r, cx + 2 * lobe, cy - 0.3 * r + 2 * lobe), color)
        draw.polygon([(cx, cy + 0.2 * r), (cx + 0.35 * r, cy + r), (cx - 0.35 * r, cy + r)], color)
    else:  # clubs: three balls and a stem
        ball = 0.42 * r
        for bx, by in (
            (cx, cy - 0.5 * r),
            (cx - 0.5 * r, cy + 0.15 * r),
            (cx + 0.5 * r, cy + 0.15 * r),
        ):
            draw.ellipse((bx - ball, by - ball, bx + ball, by + ball), color)
        draw.polygon([(cx, cy), (cx + 0.3 * r, cy + r), (cx - 0.3 * r, cy + r)], color)


def _draw_card(
    draw: ImageDraw.ImageDraw, card: Card | None, x: int, y: int, w: int, h: int
) -> None:
    box = (x, y, x + w, y + h)
    radius = max(3, w // 10)
    if card is None:  # face down: a patterned back
        draw.rounded_rectangle(box, radius, fill=(40, 60, 150), outline=(240, 240, 240), width=3)
        step = max(6, w // 8)
        for k in range(-h, w, step):
            draw.line(
                (x + max(k, 0), y + max(-k, 0), x + min(k + h, w), y + min(h, w - k)),
                fill=(90, 110, 200),
                width=2,
            )
        return
    draw.rounded_rectangle(box, radius, fill=(250, 250, 245), outline=(60, 60, 60), width=2)
    color = _RED if card.suit in ("H", "D") else _BLACK
    corner = _font(max(10, h // 6))
    draw.text((x + w * 0.08, y + h * 0.04), card.rank, fill=color, font=corner)
    _suit_shape(draw, card.suit, x + w * 0.18, y + h * 0.33, h * 0.07)
    big = _font(max(12, int(h * 0.3)))
    draw.text((x + w / 2, y + h * 0.58), card.rank, fill=color, font=big, anchor="mm")
    _suit_shape(draw, card.suit, x + w * 0.78, y + h * 0.84, h * 0.08)


def render_table(
    rows: Sequence[tuple[str, Sequence[Card | None]]],
    captions: Sequence[str],
    size: tuple[int, int] = (480, 320),
    caption_size: int = 20,
) -> np.ndarray:
    """A green table with labelled rows of cards (``None`` = face down) and text lines below
    in a ``caption_size`` font.

    Cards shrink to fit the row width, so the frame keeps a fixed ``size`` (width, height).
    """
    width, height = size
    image = Image.new("RGB", size, _TABLE)
    draw = ImageDraw.Draw(image)
    line_h = caption_size + 8
    caption_h = line_h * len(captions) + 8
    rows = [r for r in rows if r[1]] or list(rows)
    row_h = (height - caption_h) // max(1, len(rows))
    label_font = _font(14)
    for index, (label, cards) in enumerate(rows):
        top = index * row_h
        label_h = 18 if label else 0
        if label:
            draw.text((10, top + 3), label, fill=(255, 255, 255), font=label_font)
        card_h = row_h - label_h - 10
        card_w = int(card_h * 0.7)
        n = max(1, len(cards))
        gap = 10
        card_w = min(card_w, (width - gap * (n + 1)) // n)
        card_h = min(card_h, int(card_w / 0.7))
        total = n * card_w + (n - 1) * gap
        left = (width - total) // 2
        for k, card in enumerate(cards):
            _draw_card(draw, card, left + k * (card_w + gap), top + label_h + 4, card_w, card_h)
    caption_font = _font(caption_size)
    # Captions sit under the cards, or in the middle of an empty table.
    caption_top = height - caption_h if rows else (height - caption_h) // 2
    for k, line in enumerate(captions):
        y = caption_top + 4 + line_h * k
        draw.text(
            (width / 2, y + line_h // 2 - 2),
            line,
            fill=(255, 255, 255),
            font=caption_font,
            anchor="mm",
        )
    return np.asarray(image, dtype=np.uint8).copy()


def render_panels(
    panels: Sequence[tuple[str, str]], size: tuple[int, int] = (480, 320)
) -> np.ndarray:
    """Each ``(label, value)`` in its own column of the table, the label small at the top and
    the value as large as the column allows, with an empty column between neighbours: a model
    that sees the frame as a few coarse patches finds each value in patches of its own."""
    width, height = size
    image = Image.new("RGB", size, _TABLE)
    draw = ImageDraw.Draw(image)
    columns = max(1, 2 * len(panels) - 1)  # panel k in column 2k, blanks between
    column = width / columns
    label_font = _font(max(8, height // 12))
    for k, (label, value) in enumerate(panels):
        cx = column * (2 * k + 0.5)
        draw.text((cx, height * 0.08), label, fill=(255, 255, 255), font=label_font, anchor="mm")
        # the largest font whose value fits its column and the space under the label
        size_pt = int(height * 0.7)
        font = _font(size_pt)
        while size_pt > 8:
            left, top, right, bottom = draw.textbbox((0, 0), value, font=font)
            if right - left <= 0.9 * column and bottom - top <= 0.75 * height:
                break
            size_pt -= 4
            font = _font(size_pt)
        draw.text((cx, height * 0.58), value, fill=(255, 255, 255), font=font, anchor="mm")
    return np.asarray(image, dtype=np.uint8).copy()

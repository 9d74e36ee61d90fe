"""Draw an ALFWorld scene with Pillow: the room's receptacles, where the agent is, what it sees
and what it holds.

The view is a floor plan of tiles, one per receptacle. The tile the agent faces has a yellow
frame and the agent's figure; its contents are listed when it is open (or has no door).
Closed receptacles show a door. Other tiles show no contents: as in ALFWorld, the agent only
sees what is in front of it. The top bar names the room and what the agent holds; small dots
mark an object's state (red hot, blue cool, green clean, yellow a lamp that is on).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from odyssey_core.common.images import Font, load_font
from odyssey_core.envs.alfworld.scene import Item, Scene

__all__ = ["render_scene"]

_BACKGROUND = (236, 230, 218)
_BAR = (52, 58, 72)
_BAR_TEXT = (245, 245, 245)
_INK = (30, 30, 30)
_FACING = (250, 200, 40)
_DOOR = (150, 105, 65)
_STATE_COLORS = {"hot": (215, 50, 40), "cool": (50, 120, 220), "clean": (40, 170, 90)}
_STATE_COLORS["on"] = (245, 205, 30)
_KIND_COLORS = {
    "fridge": (190, 215, 235),
    "microwave": (170, 170, 175),
    "stoveburner": (120, 120, 125),
    "sinkbasin": (170, 215, 225),
    "bathtubbasin": (170, 215, 225),
    "toilet": (240, 240, 240),
    "garbagecan": (110, 140, 100),
    "bed": (185, 160, 205),
    "sofa": (185, 150, 190),
    "armchair": (185, 150, 190),
    "shelf": (215, 190, 140),
    "cabinet": (195, 150, 100),
    "drawer": (200, 160, 110),
    "dresser": (190, 145, 95),
}
_SURFACE = (205, 175, 135)  # tables, countertops and anything else


_FACES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf")


def _font(size: int) -> Font:
    return load_font(size, _FACES)


def _fitted_font(draw: ImageDraw.ImageDraw, text: str, width: float, size: int) -> Font:
    """The largest font (down to 7 px) in which ``text`` fits ``width``."""
    while size > 7 and draw.textlength(text, font=_font(size)) > width:
        size -= 1
    return _font(size)


def _state_dots(draw: ImageDraw.ImageDraw, item: Item, x: float, cy: float, r: float) -> float:
    """Dots for the item's states from ``x`` rightwards; returns where they end."""
    for state in item.states:
        draw.ellipse((x, cy - r, x + 2 * r, cy + r), fill=_STATE_COLORS[state], outline=_INK)
        x += 2 * r + 2
    return x


def _agent(draw: ImageDraw.ImageDraw, cx: float, bottom: float, height: float) -> None:
    """A small figure standing on ``bottom``."""
    head = height * 0.18
    draw.ellipse((cx - head, bottom - height, cx + head, bottom - height + 2 * head), fill=_BAR)
    draw.polygon(
        [
            (cx - height * 0.22, bottom),
            (cx + height * 0.22, bottom),
            (cx + height * 0.12, bottom - height + 2.2 * head),
            (cx - height * 0.12, bottom - height + 2.2 * head),
        ],
        fill=_BAR,
    )


def _door(draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float]) -> None:
    x0, y0, x1, y1 = box
    mid = (x0 + x1) / 2
    for left, right in ((x0, mid - 1), (mid + 1, x1)):
        draw.rectangle((left, y0, right, y1), fill=_DOOR, outline=_INK)
    knob = max(2.0, (y1 - y0) * 0.06)
    for kx in (mid - 3 - knob, mid + 3):
        draw.ellipse((kx, (y0 + y1) / 2 - knob / 2, kx + knob, (y0 + y1) / 2 + knob / 2), fill=_INK)


def _item_line(
    draw: ImageDraw.ImageDraw, item: Item, x: float, y: float, width: float, size: int
) -> None:
    r = max(2.0, size * 0.3)
    font = _fitted_font(draw, item.name, width - (2 * r + 2) * len(item.states) - 4, size)
    draw.text((x, y), item.name, fill=_INK, font=font)
    end = x + draw.textlength(item.name, font=font) + 3
    _state_dots(draw, item, end, y + size * 0.6, r)


def render_scene(scene: Scene, room: str, size: tuple[int, int] = (480, 320)) -> np.ndarray:
    """The scene as ``uint8[H, W, 3]`` with ``size = (width, height)``."""
    width, height = int(size[0]), int(size[1])
    image = Image.new("RGB", (width, height), _BACKGROUND)
    draw = ImageDraw.Draw(image)
    unit = max(8, min(width, height) // 24)  # base text size

    # Top bar: the room, then what the agent holds.
    bar = int(unit * 2.1)
    draw.rectangle((0, 0, width, bar), fill=_BAR)
    draw.text((unit * 0.6, bar / 2), room, fill=_BAR_TEXT, font=_font(unit + 2), anchor="lm")
    held = scene.held
    label = "holding: " + (", ".join(i.name for i in held) if held else "nothing")
    font = _fitted_font(draw, label, width * 0.55, unit + 1)
    dots = sum(2 * (unit * 0.35) + 2 for i in held for _ in i.states)
    x = width - unit * 0.6 - dots - draw.textlength(label, font=font)
    draw.text((x, bar / 2), label, fill=_BAR_TEXT, font=font, anchor="lm")
    x += draw.textlength(label, font=font) + 3
    for item in held:
        x = _state_dots(draw, item, x, bar / 2, unit * 0.35)

    # Bottom line: where the agent stands.
    foot = int(unit * 1.8)
    where = "at " + ", ".join(scene.facing) if scene.facing else "in the middle of the room"
    draw.text(
        (unit * 0.6, height - foot / 2),
        f"you are {where}",
        fill=_INK,
        font=_font(unit),
        anchor="lm",
    )

    # The floor plan.
    receptacles = scene.receptacles
    top, bottom, margin = bar + unit * 0.5, height - foot, unit * 0.5
    if not receptacles:
        return np.asarray(image, dtype=np.uint8)
    area_w, area_h = width - 2 * margin, bottom - top
    cols = max(1, min(len(receptacles), math.ceil(math.sqrt(len(receptacles) * area_w / area_h))))
    rows = math.ceil(len(receptacles) / cols)
    tile_w, tile_h = area_w / cols, area_h / rows
    gap = max(3.0, unit * 0.35)
    label_size = max(7, min(unit, int(tile_h * 0.16)))
    facing = set(scene.facing)
    for index, receptacle in enumerate(receptacles):
        row, col = divmod(index, cols)
        x0 = margin + col * tile_w + gap / 2
        y0 = top + row * tile_h + gap / 2
        x1, y1 = x0 + tile_w - gap, y0 + tile_h - gap
        fill = _KIND_COLORS.get(receptacle.kind, _SURFACE)
        here = receptacle.name in facing
        draw.rounded_rectangle(
            (x0, y0, x1, y1),
            radius=gap,
            fill=fill,
            outline=_FACING if here else _INK,
            width=max(2, int(gap * 0.9)) if here else 1,
        )
        name_font = _fitted_font(draw, receptacle.name, x1 - x0 - 2 * gap, label_size)
        draw.text(
            ((x0 + x1) / 2, y0 + gap * 0.6), receptacle.name, fill=_INK, font=name_font, anchor="mt"
        )
        body = (x0 + gap, y0 + gap + label_size * 1.4, x1 - gap, y1 - gap)
        if receptacle.openable and not receptacle.opened:
            door_w = min(body[2] - body[0], (body[3] - body[1]) * 1.2)
            cx = (body[0] + body[2]) / 2
            _door(draw, (cx - door_w / 2, body[1], cx + door_w / 2, body[3]))
        elif receptacle.openable:  # open: the door swung aside
            draw.rectangle((body[0], body[1], body[0] + gap * 0.8, body[3]), fill=_DOOR)
        if here:
            _agent(draw, x1 - gap - label_size * 0.6, y1 - gap * 0.5, label_size * 2.2)
            if receptacle.shows_contents:
                items = scene.contents(receptacle.name)
                line = label_size * 1.25
                fits = max(1, int((body[3] - body[1]) // line))
                shown = items if len(items) <= fits else items[: fits - 1]
                text_w = body[2] - body[0] - label_size * 1.6
                for k, item in enumerate(shown):
                    _item_line(draw, item, body[0] + gap, body[1] + k * line, text_w, label_size)
                if len(shown) < len(items):
                    more = f"+{len(items) - len(shown)} more"
                    draw.text(
                        (body[0] + gap, body[1] + len(shown) * line),
                        more,
                        fill=_INK,
                        font=_font(label_size),
                    )
                if not items:
                    draw.text((body[0] + gap, body[1]), "empty", fill=_INK, font=_font(label_size))
    return np.asarray(image, dtype=np.uint8)

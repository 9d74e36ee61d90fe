"""The element tree of one app screen: what both renderers draw and what rewards check.

One coordinate convention end to end: a :data:`Box` is ``(x0, y0, x1, y1)`` in the stored
screenshot's pixels, both corners inclusive (a point on the border is inside), origin at the
top-left. Points a model answers with are in the same pixels; a model that works in another
space converts once, where it is called (``odyssey_core.protocol.gui.rescale_point``).

Elements are listed in paint order: a later element is drawn over an earlier one, so
:meth:`Screen.hit` answers with the *last* clickable element that contains the point (a pop-up
sheet is listed after the page it covers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CLICKABLE_ROLES", "ROLES", "Box", "Element", "Screen", "box_contains"]

Box = tuple[int, int, int, int]  # x0, y0, x1, y1, inclusive, stored-image pixels

#: what an element is; the renderers style each role, the demonstrator reads it
ROLES: tuple[str, ...] = (
    "status_bar",  # the phone's top bar (time, battery): not clickable
    "title",  # a screen's heading
    "text",  # a label or a paragraph
    "button",  # clickable: search, apply, tabs, chips, the app icons on home
    "field",  # a text field: click focuses it, ``type`` fills it
    "date",  # a date picker cell (clickable)
    "list_item",  # a result row (clickable: opens its detail card)
    "image",  # a picture placeholder
    "sheet",  # a pop-up or filter sheet's backdrop panel (covers the page under it)
    "close",  # the pop-up's close control (clickable; ``exit`` does the same)
)
CLICKABLE_ROLES: frozenset[str] = frozenset({"button", "field", "date", "list_item", "close"})


def box_contains(box: Box, point: tuple[float, float]) -> bool:
    """Whether ``point`` lies in ``box``, borders included."""
    x, y = point
    x0, y0, x1, y1 = box
    return x0 <= x <= x1 and y0 <= y <= y1


@dataclass(frozen=True)
class Element:
    """One element: ``id`` is unique on its screen and stable across renderers."""

    id: str
    role: str
    box: Box
    text: str = ""
    # what the app does when it is clicked (an app-level command such as "open:hotel",
    # "focus:city", "select:item-3"); None: nothing
    command: str | None = None
    selected: bool = False  # a chosen chip / date / tab, drawn highlighted
    value: str = ""  # a field's current text

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"element {self.id!r}: unknown role {self.role!r}; roles: {ROLES}")
        x0, y0, x1, y1 = self.box
        if not (x0 <= x1 and y0 <= y1):
            raise ValueError(f"element {self.id!r}: box {self.box} is not (x0, y0, x1, y1)")

    @property
    def clickable(self) -> bool:
        return self.role in CLICKABLE_ROLES and self.command is not None

    @property
    def center(self) -> tuple[int, int]:
        x0, y0, x1, y1 = self.box
        return (x0 + x1) // 2, (y0 + y1) // 2

    def contains(self, point: tuple[float, float]) -> bool:
        return box_contains(self.box, point)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["box"] = list(self.box)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Element:
        return cls(**{**data, "box": tuple(int(v) for v in data["box"])})


@dataclass(frozen=True)
class Screen:
    """A whole screen: its name (``"home"``, ``"search"``, ``"results"`` ...), its size in
    pixels and its elements in paint order."""

    name: str
    width: int
    height: int
    elements: tuple[Element, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        ids = [e.id for e in self.elements]
        if len(set(ids)) != len(ids):
            raise ValueError(f"screen {self.name!r}: element ids repeat")
        for e in self.elements:
            x0, y0, x1, y1 = e.box
            if x0 < 0 or y0 < 0 or x1 >= self.width or y1 >= self.height:
                raise ValueError(
                    f"screen {self.name!r}: element {e.id!r} box {e.box} leaves the "
                    f"{self.width}x{self.height} screen"
                )

    def __iter__(self) -> Iterator[Element]:
        return iter(self.elements)

    def element(self, element_id: str) -> Element:
        for e in self.elements:
            if e.id == element_id:
                return e
        raise KeyError(f"screen {self.name!r} has no element {element_id!r}")

    def hit(self, point: tuple[float, float]) -> Element | None:
        """The topmost clickable element under ``point``; None when the point hits nothing
        clickable. A sheet swallows clicks on what it covers."""
        for e in reversed(self.elements):
            if not e.contains(point):
                continue
            if e.clickable:
                return e
            if e.role == "sheet":
                return None
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "width": self.width,
            "height": self.height,
            "elements": [e.to_json() for e in self.elements],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Screen:
        return cls(
            name=str(data["name"]),
            width=int(data["width"]),
            height=int(data["height"]),
            elements=tuple(Element.from_json(e) for e in data["elements"]),
        )

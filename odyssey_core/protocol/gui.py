"""The GUI agent's actions and its answer format: ``<think>...</think><answer>{...}</answer>``.

ESPO's response format (``RESPONSE_FORMATS["espo"]``) and the actions of the personalized-GUI
env (:mod:`odyssey_core.envs.persona`) share these types; they live in the protocol so that
the format needs nothing from the env.

The answer holds exactly one dictionary with ``action``, ``point`` ``[x, y]`` and
``input_text``. Action types (the ESPO paper's list):

* ``click`` a point; ``type`` text into the field at a point;
* ``scroll up|down|left|right`` and ``exit`` (close a pop-up, go back): point ``[-100, -100]``;
* ``pool_found``: the item list matches the user (the paper's prompt also calls it
  ``complete``; both are accepted and stored as ``pool_found``); ``input_text`` is a short
  summary of the user's intent; point ``[-100, -100]``;
* ``recommendation``: ``input_text`` is exactly ``Yes`` or ``No``; point ``[-100, -100]``.

Non-spatial actions carry :data:`NO_POINT`; actions without text carry :data:`NO_TEXT`.
Points are in the stored screenshot's pixels (see :mod:`odyssey_core.envs.persona.screen`).
A point is two finite numbers (or numeric strings) of magnitude at most
:data:`MAX_COORDINATE`: anything else (``1e999``, ``NaN``, a nested list, a boolean) is not a
point, so no later arithmetic on it can overflow.
:func:`parse_gui_answer` never raises: a malformed answer comes back with ``valid=False`` and
the reason, so a reward can score the format and a rollout can go on.
"""

from __future__ import annotations

import ast
import json
import math
import reprlib
import warnings
from dataclasses import dataclass
from typing import Any

from odyssey_core.protocol.parsing import coerce_text

__all__ = [
    "ACTION_TYPES",
    "MAX_COORDINATE",
    "NO_POINT",
    "NO_TEXT",
    "POINTED_ACTIONS",
    "STAGE_ACTIONS",
    "GuiAction",
    "ParsedGuiAnswer",
    "format_gui_answer",
    "parse_gui_answer",
    "read_point",
    "rescale_point",
]

NO_POINT: tuple[int, int] = (-100, -100)
NO_TEXT = "no input text"
#: the largest coordinate magnitude read as a point: far beyond any screen, small enough that
#: squares and float32 tensors of it stay finite
MAX_COORDINATE = 1_000_000
ACTION_TYPES: tuple[str, ...] = (
    "click",
    "type",
    "scroll up",
    "scroll down",
    "scroll left",
    "scroll right",
    "exit",
    "pool_found",
    "recommendation",
)
POINTED_ACTIONS: frozenset[str] = frozenset({"click", "type"})
ALIASES: dict[str, str] = {"complete": "pool_found"}
#: which action types belong to which stage of an episode
STAGE_ACTIONS: dict[str, frozenset[str]] = {
    "search": frozenset(ACTION_TYPES[:7]),
    "pool": frozenset({"pool_found"}),
    "recommend": frozenset({"recommendation"}),
}

# error texts quote what the model wrote, cut short whatever its size or depth
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 4, 4
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = 40


def _coordinate(value: Any) -> int | None:
    """One coordinate as an int, or None when ``value`` is not a finite number in range."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int):
        return value if abs(value) <= MAX_COORDINATE else None
    if isinstance(value, float) and math.isfinite(value) and abs(value) <= MAX_COORDINATE:
        return round(value)
    return None


def read_point(value: Any) -> tuple[int, int] | None:
    """``value`` as an ``(x, y)`` point: a list or tuple of two finite numbers (or numeric
    strings) of magnitude at most :data:`MAX_COORDINATE`, rounded; None for anything else."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    x, y = _coordinate(value[0]), _coordinate(value[1])
    if x is None or y is None:
        return None
    return x, y


def _point_error(value: Any) -> str:
    return (
        f"point must be [x, y] of two finite numbers within +-{MAX_COORDINATE}, "
        f"got {_SHORT.repr(value)}"
    )


@dataclass(frozen=True)
class GuiAction:
    """One action; ``point`` is :data:`NO_POINT` for non-spatial actions."""

    action: str
    point: tuple[int, int] = NO_POINT
    input_text: str = NO_TEXT

    def __post_init__(self) -> None:
        if self.action not in ACTION_TYPES:
            raise ValueError(f"unknown action {self.action!r}; actions: {ACTION_TYPES}")

    @property
    def spatial(self) -> bool:
        return self.action in POINTED_ACTIONS

    @property
    def text(self) -> str:
        """The typed / summary / Yes-No text, or "" when the action carries none."""
        return "" if self.input_text == NO_TEXT else self.input_text

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "point": list(self.point), "input_text": self.input_text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GuiAction:
        """The action of a stored record; raises ValueError on a record that is not one."""
        raw = data.get("point") or NO_POINT
        point = read_point(raw)
        if point is None:
            raise ValueError(f"stored action {_SHORT.repr(data)}: {_point_error(raw)}")
        return cls(
            action=ALIASES.get(str(data["action"]), str(data["action"])),
            point=point,
            input_text=str(data.get("input_text", NO_TEXT)),
        )

    def describe(self) -> str:
        """A short history line, e.g. ``click [120, 340]`` or ``type "Paris"``."""
        if self.action == "click":
            return f"click [{self.point[0]}, {self.point[1]}]"
        if self.action == "type":
            return f'type "{self.text}" at [{self.point[0]}, {self.point[1]}]'
        if self.action in ("pool_found", "recommendation"):
            return f'{self.action} "{self.text}"'
        return self.action


@dataclass(frozen=True)
class ParsedGuiAnswer:
    """What :func:`parse_gui_answer` read. ``action`` is None when no usable dictionary was
    found; ``thought_span`` / ``answer_span`` are character spans of the think and answer
    blocks' contents (None when absent), which become the thought / action token masks."""

    action: GuiAction | None
    valid: bool  # the whole format: one think block, one answer with one proper dictionary
    error: str | None
    thought: str
    thought_span: tuple[int, int] | None
    answer_span: tuple[int, int] | None


def _blocks(text: str, tag: str) -> list[tuple[int, int]]:
    """The content spans of the ``<tag>...</tag>`` blocks, each opening tag closed by the first
    closing tag after it (a lazy regex match), found in linear time: once an opening tag has
    no closing tag after it, no later one has."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    spans: list[tuple[int, int]] = []
    position = 0
    while (start := text.find(opening, position)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            break
        spans.append((start + len(opening), end))
        position = end + len(closing)
    return spans


#: what reading a Python literal or JSON can raise on hostile text (deep nesting, huge ints)
_LOAD_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, OverflowError)


def _literal(body: str) -> Any:
    # compiling model text warns on escapes such as "\:"; the text is data, not code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(body)


def _dictionary(body: str) -> tuple[dict[str, Any] | None, str | None]:
    body = body.strip()
    if body.startswith("[") and body.endswith("]") and ":" in body:
        body = "{" + body[1:-1] + "}"  # the paper's prompt writes the dictionary in brackets
    for loader in (json.loads, _literal):
        try:
            value = loader(body)
        except _LOAD_ERRORS:
            continue
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, dict):
            return value, None
        return None, "the answer is not one dictionary"
    return None, "the answer is not a dictionary (JSON or Python literal)"


def _text_field(value: Any) -> str:
    return NO_TEXT if value is None else str(value).strip() or NO_TEXT


def _parse(text: str) -> ParsedGuiAnswer:
    thinks, answers = _blocks(text, "think"), _blocks(text, "answer")
    thought_span = thinks[0] if thinks else None
    thought = text[slice(*thought_span)].strip() if thought_span else ""
    answer_span = answers[0] if answers else None

    def fail(reason: str, action: GuiAction | None = None) -> ParsedGuiAnswer:
        return ParsedGuiAnswer(action, False, reason, thought, thought_span, answer_span)

    if not answers:
        return fail("no <answer>...</answer> block")
    data, error = _dictionary(text[slice(*answers[0])])
    if data is None:
        return fail(error or "unreadable answer")
    raw_action = data.get("action")
    raw_type = "" if raw_action is None else str(raw_action).strip().lower()
    kind = ALIASES.get(raw_type, raw_type)
    if kind not in ACTION_TYPES:
        return fail(f"unknown action {_SHORT.repr(raw_type)}")
    raw_point = data.get("point", list(NO_POINT))
    xy = read_point(raw_point)
    if xy is None:
        return fail(_point_error(raw_point))
    input_text = _text_field(data.get("input_text", NO_TEXT))
    if kind == "recommendation":
        word = input_text.strip(".").capitalize()
        if word in ("Yes", "No"):
            input_text = word
    action = GuiAction(kind, xy, input_text)
    if kind in POINTED_ACTIONS and xy == NO_POINT:
        return fail(f"{kind} needs a point on the screen", action)
    if kind not in POINTED_ACTIONS and xy != NO_POINT:
        return fail(f"{kind} takes point [-100, -100]", action)
    if kind == "recommendation" and input_text not in ("Yes", "No"):
        return fail("a recommendation's input_text must be exactly 'Yes' or 'No'", action)
    if kind in ("type", "pool_found") and input_text == NO_TEXT:
        return fail(f"{kind} needs input_text", action)
    if len(thinks) != 1 or len(answers) != 1:
        return fail("exactly one <think> and one <answer> block", action)
    return ParsedGuiAnswer(action, True, None, thought, thought_span, answer_span)


def parse_gui_answer(text: Any) -> ParsedGuiAnswer:
    """Read a response; never raises. Checks the action type, that spatial actions have an
    ``[x, y]`` of two finite numbers, that non-spatial ones have ``[-100, -100]``, and that a
    recommendation says exactly ``Yes`` or ``No``. ``None`` reads as "", bytes as UTF-8."""
    try:
        return _parse(coerce_text(text))
    except Exception as exc:  # a parser bug must not take a rollout worker down
        return ParsedGuiAnswer(None, False, f"parse_failure: {type(exc).__name__}", "", None, None)


def format_gui_answer(action: GuiAction, thought: str) -> str:
    """The response a demonstration teaches: ``<think>thought</think><answer>{json}</answer>``."""
    return f"<think>{thought}</think><answer>{json.dumps(action.to_json())}</answer>"


def rescale_point(
    point: tuple[float, float], source: tuple[int, int], target: tuple[int, int]
) -> tuple[int, int]:
    """A point from a ``source`` (width, height) image's pixels to a ``target`` image's, the
    one place coordinates change space; :data:`NO_POINT` stays as it is."""
    if tuple(point) == NO_POINT:
        return NO_POINT
    (sw, sh), (tw, th) = source, target
    return (
        min(tw - 1, max(0, round(point[0] * tw / sw))),
        min(th - 1, max(0, round(point[1] * th / sh))),
    )

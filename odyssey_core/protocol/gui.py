"""The GUI agent's actions and its answer format: ``<think>...</think><answer>{...}</answer>``.

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
:func:`parse_gui_answer` never raises: a malformed answer comes back with ``valid=False`` and
the reason, so a reward can score the format and a rollout can go on.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACTION_TYPES",
    "NO_POINT",
    "NO_TEXT",
    "POINTED_ACTIONS",
    "STAGE_ACTIONS",
    "GuiAction",
    "ParsedGuiAnswer",
    "format_gui_answer",
    "parse_gui_answer",
    "rescale_point",
]

NO_POINT: tuple[int, int] = (-100, -100)
NO_TEXT = "no input text"
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
        point = data.get("point") or NO_POINT
        return cls(
            action=ALIASES.get(str(data["action"]), str(data["action"])),
            point=(round(float(point[0])), round(float(point[1]))),
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


_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _dictionary(body: str) -> tuple[dict[str, Any] | None, str | None]:
    body = body.strip()
    if body.startswith("[") and body.endswith("]") and ":" in body:
        body = "{" + body[1:-1] + "}"  # the paper's prompt writes the dictionary in brackets
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, dict):
            return value, None
        return None, "the answer is not one dictionary"
    return None, "the answer is not a dictionary (JSON or Python literal)"


def parse_gui_answer(text: Any) -> ParsedGuiAnswer:
    """Read a response; never raises. Checks the action type, that spatial actions have an
    ``[x, y]`` of two numbers, that non-spatial ones have ``[-100, -100]``, and that a
    recommendation says exactly ``Yes`` or ``No``."""
    text = text if isinstance(text, str) else str(text)
    thinks, answers = list(_THINK.finditer(text)), list(_ANSWER.finditer(text))
    thought = thinks[0].group(1).strip() if thinks else ""
    thought_span = thinks[0].span(1) if thinks else None
    answer_span = answers[0].span(1) if answers else None

    def fail(reason: str, action: GuiAction | None = None) -> ParsedGuiAnswer:
        return ParsedGuiAnswer(action, False, reason, thought, thought_span, answer_span)

    if not answers:
        return fail("no <answer>...</answer> block")
    data, error = _dictionary(answers[0].group(1))
    if data is None:
        return fail(error or "unreadable answer")
    raw_type = str(data.get("action", "")).strip().lower()
    kind = ALIASES.get(raw_type, raw_type)
    if kind not in ACTION_TYPES:
        return fail(f"unknown action {raw_type!r}")
    point = data.get("point", list(NO_POINT))
    try:
        x, y = (float(v) for v in point)
        xy = (round(x), round(y))
    except (TypeError, ValueError):
        return fail(f"point must be [x, y], got {point!r}")
    input_text = str(data.get("input_text", NO_TEXT)).strip() or NO_TEXT
    if kind == "recommendation":
        word = input_text.strip().strip(".").capitalize()
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

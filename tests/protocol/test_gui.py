"""ESPO's GUI answer parser on hostile values: points that are not two finite numbers in range
(``1e999``, ``NaN``, 400-digit integers, booleans, nested lists) are invalid answers with no
action, never an exception; in-range numbers and numeric strings are read as before."""

from __future__ import annotations

import json

import pytest
from helpers_answers import FINE_COORDINATES, HOSTILE_COORDINATES

from odyssey_core.protocol.gui import (
    MAX_COORDINATE,
    NO_TEXT,
    GuiAction,
    format_gui_answer,
    parse_gui_answer,
    read_point,
)

#: the answer that raised OverflowError ("cannot convert float infinity to integer")
OVERFLOWING = '<think>top left</think><answer>{"action": "click", "point": [1e999, 5]}</answer>'


def _click(point: str, quote: str = '"') -> str:
    body = f'{{"action": "click", "point": {point}, "input_text": "no input text"}}'
    return f"<think>there</think><answer>{body.replace(chr(34), quote)}</answer>"


def test_a_point_of_1e999_is_an_invalid_answer_without_an_action() -> None:
    parsed = parse_gui_answer(OVERFLOWING)
    assert not parsed.valid and parsed.action is None
    assert parsed.error == (
        f"point must be [x, y] of two finite numbers within +-{MAX_COORDINATE}, got [inf, 5]"
    )
    assert parsed.thought == "top left" and parsed.answer_span is not None


@pytest.mark.parametrize("coordinate", HOSTILE_COORDINATES)
@pytest.mark.parametrize("first", [True, False])
def test_no_hostile_coordinate_makes_a_point(coordinate: str, first: bool) -> None:
    point = f"[{coordinate}, 7]" if first else f"[7, {coordinate}]"
    parsed = parse_gui_answer(_click(point))
    assert not parsed.valid and parsed.action is None
    assert parsed.error.startswith("point must be [x, y] of two finite numbers"), parsed.error


@pytest.mark.parametrize(
    "point", ["[1e999, 5]", "[-1e999, 5]", "[1e300, 5]", "[%s, 5]" % ("9" * 400), "[True, 5]"]
)
def test_python_literal_answers_with_hostile_points_are_invalid(point: str) -> None:
    parsed = parse_gui_answer(_click(point, quote="'"))
    assert not parsed.valid and parsed.action is None and "point" in parsed.error


@pytest.mark.parametrize(
    "point",
    ['"12"', '"[12, 34]"', "[1, 2, 3]", "[]", "null", "{}", "12", '[{"x": 1}, 2]'],
)
def test_a_point_must_be_a_pair(point: str) -> None:
    # a two-character string once read as the point (1, 2)
    parsed = parse_gui_answer(_click(point))
    assert not parsed.valid and parsed.action is None and "point" in parsed.error


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        ("[12.5, 340]", (12, 340)),
        ('["120", "340"]', (120, 340)),
        ("[1e2, -0.0]", (100, 0)),
        (f"[{MAX_COORDINATE}, {-MAX_COORDINATE}]", (MAX_COORDINATE, -MAX_COORDINATE)),
        ("[-5, 3]", (-5, 3)),  # off the screen: a miss for the reward, not a malformed answer
    ],
)
def test_numbers_in_range_are_read_as_before(point: str, expected: tuple[int, int]) -> None:
    parsed = parse_gui_answer(_click(point))
    assert parsed.valid and parsed.action == GuiAction("click", expected)


@pytest.mark.parametrize("coordinate", FINE_COORDINATES)
def test_every_fine_coordinate_reads(coordinate: str) -> None:
    assert read_point(json.loads(f"[{coordinate}, 1]")) is not None


def test_non_spatial_actions_and_texts_with_odd_values() -> None:
    exit_inf = '<think>t</think><answer>{"action": "exit", "point": [-1e999, -100]}</answer>'
    assert parse_gui_answer(exit_inf).action is None
    null_text = '<think>t</think><answer>{"action": "type", "point": [3, 4], "input_text": null}'
    parsed = parse_gui_answer(null_text + "</answer>")
    assert parsed.action == GuiAction("type", (3, 4), NO_TEXT) and not parsed.valid
    assert parsed.error == "type needs input_text"
    huge_text = '{"action": "type", "point": [3, 4], "input_text": 1e999}'
    parsed = parse_gui_answer(f"<think>t</think><answer>{huge_text}</answer>")
    assert parsed.valid and parsed.action.input_text == "inf"  # text, whatever it says
    null_action = '<think>t</think><answer>{"action": null}</answer>'
    assert parse_gui_answer(null_action).error == "unknown action ''"


def test_deep_and_long_answers_are_invalid_not_errors() -> None:
    for body in ("[" * 50_000, "[" * 3000 + "]" * 3000, '{"point": ' + "[" * 3000 + "}"):
        parsed = parse_gui_answer(f"<think>t</think><answer>{body}</answer>")
        assert not parsed.valid and parsed.action is None
        assert not parsed.error.startswith("parse_failure"), parsed.error
    long_point = "[" + ", ".join(["1"] * 10_000) + "]"
    parsed = parse_gui_answer(_click(long_point))
    assert not parsed.valid and len(parsed.error) < 200  # the echo of the value is cut short


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


def test_any_object_is_an_answer() -> None:
    assert parse_gui_answer(None).error == "no <answer>...</answer> block"
    assert parse_gui_answer(format_gui_answer(GuiAction("exit"), "t").encode()).valid
    failed = parse_gui_answer(_Unprintable())
    assert not failed.valid and failed.action is None
    assert failed.error == "parse_failure: RuntimeError"


def test_a_stored_action_with_a_bad_point_is_named() -> None:
    assert GuiAction.from_json({"action": "click", "point": [3.4, 5]}).point == (3, 5)
    with pytest.raises(ValueError, match=r"point must be \[x, y\] of two finite numbers"):
        GuiAction.from_json({"action": "click", "point": [float("inf"), 5]})
    with pytest.raises(ValueError, match="got 'ab'"):
        GuiAction.from_json({"action": "click", "point": "ab"})

"""Hypothesis strategies for model answers that are nearly right: the structure of each
response format (tags, JSON-ish dictionaries and lists, quotes) with values a broken or
hostile model writes (``1e999``, ``NaN``, 400-digit integers, nested lists, booleans, null).

Three formats: ``odysseus`` (``<perception>/<reasoning>/<answer>[...]``), ``gtr`` (a thought,
then ``"action": ...``) and ``espo`` (``<think>...</think><answer>{...}</answer>``)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from odyssey_core.protocol.gui import ACTION_TYPES, MAX_COORDINATE

#: coordinates no parser may read as a point: non-finite, overflowing, out of range, not numbers
HOSTILE_COORDINATES: tuple[str, ...] = (
    "1e999",
    "-1e999",
    "1e309",
    "NaN",
    "Infinity",
    "-Infinity",
    "9" * 400,
    "-" + "9" * 400,
    "1e300",
    str(MAX_COORDINATE + 1),
    str(-MAX_COORDINATE - 1),
    "true",
    "false",
    "null",
    '"inf"',
    '"nan"',
    '"-Infinity"',
    '"1e999"',
    '"twelve"',
    "[1]",
    "[1, 2]",
    "[[1, 2], 3]",
    "{}",
    '{"x": 1}',
    '""',
)
#: coordinates that read as numbers (numeric strings included), in range
FINE_COORDINATES: tuple[str, ...] = ("0", "12", "12.5", "-3", "223.9", '"120"', "1e2", "-0.0")
#: number-ish tokens for anywhere in an answer
NUMBER_TOKENS: tuple[str, ...] = (*HOSTILE_COORDINATES, *FINE_COORDINATES, "-100", "1e-999")

_NOISE = [
    "",
    " ",
    "\n",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    ",",
    ":",
    "\\",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<answer",
    "</",
    "\x00",
    "\u201c",
    "\u2019",
]


def json_values(max_leaves: int = 8) -> st.SearchStrategy:
    """JSON-ish values: finite and non-finite floats, huge integers, booleans, null, short
    strings (action names among them), nested lists and dictionaries."""
    leaves = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.integers(min_value=-2 * MAX_COORDINATE, max_value=2 * MAX_COORDINATE),
        st.booleans(),
        st.none(),
        st.text(max_size=8),
        st.sampled_from([*ACTION_TYPES, "complete", "Yes", "No", "-100"]),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(["action", "point", "input_text", "x"]), inner),
        ),
        max_leaves=max_leaves,
    )


def render_value(value: object, style: str) -> str:
    """``value`` as JSON (``NaN`` / ``Infinity`` tokens) or as a Python literal."""
    if style == "json":
        return json.dumps(value)
    return repr(value)


def value_texts() -> st.SearchStrategy[str]:
    """The text of one value: a rendered JSON-ish value or a raw number token."""
    rendered = st.builds(render_value, json_values(), st.sampled_from(["json", "python"]))
    return st.one_of(rendered, st.sampled_from(NUMBER_TOKENS))


@st.composite
def mutate(draw: st.DrawFn, text: str) -> str:
    """``text`` as is, or cut short, or with noise spliced in, or repeated."""
    kind = draw(st.sampled_from(["keep", "keep", "cut", "splice", "repeat"]))
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "splice":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from(_NOISE)) + text[at:]
    if kind == "repeat":
        return text + draw(st.sampled_from(["", " ", "\n"])) + text
    return text


# -- espo ----------------------------------------------------------------------------------------


def point_texts() -> st.SearchStrategy[str]:
    """What follows ``"point":``: two coordinates of any kind, or anything else."""
    coordinate = st.sampled_from([*HOSTILE_COORDINATES, *FINE_COORDINATES])
    pair = st.builds(lambda x, y: f"[{x}, {y}]", coordinate, coordinate)
    return st.one_of(pair, value_texts())


@st.composite
def gui_answers(draw: st.DrawFn) -> str:
    """An ESPO answer with the format's structure and fuzzed contents."""
    action = draw(
        st.one_of(
            st.sampled_from([*ACTION_TYPES, "complete", "CLICK", " Type ", "jump", ""]),
            value_texts(),
        )
    )
    fields = {
        "action": json.dumps(action) if not action.startswith(("[", "{")) else action,
        "point": draw(point_texts()),
        "input_text": draw(st.one_of(st.sampled_from(['"Yes"', '"No"', '"Rome"']), value_texts())),
    }
    names = draw(st.lists(st.sampled_from(list(fields)), max_size=4))
    body = ", ".join(f'"{name}": {fields[name]}' for name in names)
    wrapper = draw(st.sampled_from(["{%s}", "[%s]", "[{%s}]", "%s", "{%s"]))
    answer = wrapper % body
    if draw(st.booleans()):
        answer = answer.replace('"', "'")
    thought = draw(st.sampled_from(["", "open the app", "<think>", "a < b"]))
    text = f"<think>{thought}</think><answer>{answer}</answer>"
    return draw(mutate(text))


@st.composite
def gui_answers_with_hostile_point(draw: st.DrawFn) -> str:
    """A well-formed click / type answer but for one coordinate no parser may accept."""
    action = draw(st.sampled_from(["click", "type"]))
    bad = draw(st.sampled_from(HOSTILE_COORDINATES))
    good = draw(st.sampled_from(FINE_COORDINATES))
    point = f"[{bad}, {good}]" if draw(st.booleans()) else f"[{good}, {bad}]"
    answer = f'{{"action": "{action}", "point": {point}, "input_text": "Rome"}}'
    return f"<think>there</think><answer>{answer}</answer>"


# -- odysseus ------------------------------------------------------------------------------------


@st.composite
def odysseus_answers(draw: st.DrawFn, buttons: tuple[str, ...]) -> str:
    """Three tagged blocks whose answer is a JSON-ish list of buttons, numbers and values."""
    item = st.one_of(
        st.sampled_from(buttons).map(lambda b: f"'{b}'"),
        st.sampled_from(buttons).map(lambda b: f'"{b.upper()}"'),
        st.sampled_from(NUMBER_TOKENS),
        value_texts(),
    )
    items = draw(st.lists(item, max_size=4))
    answer = draw(st.sampled_from(["[%s]", "(%s)", "%s", "[[%s]]", "[%s"])) % ", ".join(items)
    perception = draw(st.sampled_from(["", "<perception>a pipe</perception>"]))
    reasoning = draw(st.sampled_from(["", "<reasoning>jump</reasoning>", "<reasoning>"]))
    return draw(mutate(f"{perception}{reasoning}<answer>{answer}</answer>"))


# -- gtr -----------------------------------------------------------------------------------------


@st.composite
def gtr_answers(draw: st.DrawFn, legal: list[str]) -> str:
    """A GTR dictionary whose action is a legal one, a number token or any JSON-ish value."""
    value = draw(
        st.one_of(
            st.sampled_from(legal).map(json.dumps),
            st.sampled_from(legal).map(lambda a: f"'{a.upper()}'"),
            st.sampled_from(NUMBER_TOKENS),
            value_texts(),
        )
    )
    thoughts = draw(st.sampled_from(['"thoughts": "add ten", ', "", '"formula": "10+", ']))
    key = draw(st.sampled_from(['"action"', "'action'", "action", "\u201caction\u201d"]))
    text = "{" + thoughts + f"{key}: {value}" + draw(st.sampled_from(["}", "", ", }"]))
    return draw(mutate(text))

"""Every answer parser under hypothesis, for a fixed example budget: it never raises, and it
returns either a legal action or an invalid result with a known error code, which the
fallback (``resolve_action`` / GTR's ``resolve``) turns into a legal action, flagged. Besides
arbitrary text, each format gets answers with its own structure and hostile values in it
(``tests/helpers_answers.py``)."""

from __future__ import annotations

import random
import re
import string

import pytest
from helpers_answers import (
    NUMBER_TOKENS,
    gtr_answers,
    gui_answers,
    gui_answers_with_hostile_point,
    odysseus_answers,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from odyssey_core.protocol import GAMEBOY_SPACE, RESPONSE_FORMATS, ActionSpace, parse_response
from odyssey_core.protocol.actions import FallbackPolicy, resolve_action
from odyssey_core.protocol.gtr_format import GTRParsed, parse_gtr_response, resolve
from odyssey_core.protocol.gui import (
    ACTION_TYPES,
    MAX_COORDINATE,
    NO_POINT,
    POINTED_ACTIONS,
    ParsedGuiAnswer,
)
from odyssey_core.protocol.parsing import ParsedResponse

BUDGET = settings(
    max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
#: the near-valid strategies build nested values: fewer, costlier examples
NEAR_BUDGET = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
MASK_BUDGET = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

ODYSSEUS_ERRORS = {
    "no_answer",
    "empty_answer",
    "malformed_answer",
    "unknown_button",
    "too_many_buttons",
    "parse_failure",
}
GTR_ERRORS = {"no_action", "empty_action", "illegal_action", "parse_failure"}

# Pieces a model (or a broken one) writes: tags in every spelling, button names in every
# case, quotes and brackets (balanced or not), separators, JSON, and arbitrary unicode.
_TAGS = [
    f"<{slash}{space}{name}{space}>"
    for name in ("perception", "reasoning", "answer", "ANSWER", "Answer", "think")
    for slash in ("", "/", "/ ")
    for space in ("", " ", "\n")
]
_PIECES = [
    *_TAGS,
    *GAMEBOY_SPACE.buttons,
    *(b.upper() for b in GAMEBOY_SPACE.buttons),
    "jump",
    "none",
    "'",
    '"',
    "`",
    "‘",
    "’",
    "“",
    "”",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ",",
    ";",
    "+",
    "|",
    "/",
    "&",
    " ",
    "\n",
    "\t",
    ":",
    '"action"',
    "action",
    "'action':",
    '"action": "',
    "10",
    "+",
    "*",
    "=",
    "hit",
    "stand",
    "Hit",
    "\x00",
    "\ufeff",
    "\u200b",
    "<",
    ">",
    "</",
    "<<answer>>",
]
texts = st.one_of(
    st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=40).map("".join),
    st.text(max_size=200),
    st.text(alphabet=string.printable, max_size=200),
)


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


odd_inputs = st.one_of(
    st.none(),
    st.binary(max_size=80),
    st.integers(),
    st.floats(allow_nan=True),
    st.lists(st.text(max_size=5), max_size=3),
    st.just(_Unprintable()),
    texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
)

spaces = st.sampled_from(
    [
        GAMEBOY_SPACE,
        ActionSpace(max_buttons=1),
        ActionSpace(max_buttons=3),
        ActionSpace(buttons=("left", "right", "noop"), max_buttons=1),
        ActionSpace(buttons=("x", "noop", "y", "zz"), max_buttons=2, null="noop"),
    ]
)
legal_lists = st.one_of(
    st.sampled_from(
        [
            ["hit", "stand"],
            ["1", "2", "10", "+", "*", "=", "J", "Q"],
            ["go to cabinet 1", "take apple 1 from table 2", "look"],
        ]
    ),
    st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6, unique=True),
)


def _check_span(span, length: int) -> None:
    if span is not None:
        start, end = span
        assert 0 <= start <= end <= length, (span, length)


def _check_odysseus(parsed: ParsedResponse, space: ActionSpace, length: int | None) -> None:
    assert isinstance(parsed, ParsedResponse)
    if parsed.valid:
        assert parsed.error is None
        assert 1 <= len(parsed.buttons) <= space.max_buttons
        assert len(set(parsed.buttons)) == len(parsed.buttons)
        assert all(b in space.buttons and b == b.lower() for b in parsed.buttons)
        assert space.is_legal(parsed.buttons)
    else:
        assert parsed.buttons == () and parsed.error in ODYSSEUS_ERRORS, parsed
    if length is not None:
        _check_span(parsed.thought_span, length)
        _check_span(parsed.answer_span, length)
        if parsed.thought_span is not None and parsed.answer_span is not None:
            assert parsed.thought_span[1] <= parsed.answer_span[0]
    # the fallback turns any outcome into a legal action, flagged when it was not the answer
    legal = set(space.legal_actions())
    for policy in FallbackPolicy:
        buttons, fell_back = resolve_action(parsed, space, policy, random.Random(0))
        assert space.canonical(buttons) in legal
        assert fell_back is (not parsed.valid)
        if parsed.valid:
            assert buttons == parsed.buttons


def _check_gtr(parsed: GTRParsed, legal: list[str], length: int | None) -> None:
    assert isinstance(parsed, GTRParsed)
    if parsed.valid:
        assert parsed.error is None and parsed.action in legal
    else:
        assert parsed.action is None and parsed.error in GTR_ERRORS, parsed
    if length is not None:
        _check_span(parsed.thought_span, length)
        _check_span(parsed.action_span, length)
    action, fell_back = resolve(parsed, legal, random.Random(0))
    assert action in legal and fell_back is (not parsed.valid)


@BUDGET
@given(text=texts, space=spaces)
def test_odysseus_parser_never_raises_and_answers_legally(text: str, space: ActionSpace) -> None:
    parsed = parse_response(text, space)
    assert parsed.error != "parse_failure", parsed.detail  # a parser bug, caught
    _check_odysseus(parsed, space, len(text))


@BUDGET
@given(value=odd_inputs)
def test_odysseus_parser_takes_any_object(value: object) -> None:
    _check_odysseus(parse_response(value), GAMEBOY_SPACE, None)


@BUDGET
@given(text=texts, legal=legal_lists, data=st.data())
def test_gtr_parser_never_raises_and_answers_legally(text: str, legal: list[str], data) -> None:
    # half the time, plant a real action key somewhere so valid answers are exercised too
    if data.draw(st.booleans()):
        action = data.draw(st.sampled_from(legal))
        quote = data.draw(st.sampled_from(['"', "'", "“", ""]))
        cut = data.draw(st.integers(0, len(text)))
        text = f'{text[:cut]}"action": {quote}{action}{quote}{text[cut:]}'
    parsed = parse_gtr_response(text, legal)
    assert parsed.error != "parse_failure", parsed.detail  # a parser bug, caught
    _check_gtr(parsed, legal, len(text))


@BUDGET
@given(value=odd_inputs, legal=st.one_of(legal_lists, st.just([]), st.just(None)))
def test_gtr_parser_takes_any_object(value: object, legal) -> None:
    parsed = parse_gtr_response(value, legal)
    assert isinstance(parsed, GTRParsed)
    if legal:
        _check_gtr(parsed, legal, None)
    else:
        assert not parsed.valid and parsed.error in GTR_ERRORS


# -- RESPONSE_FORMATS: parse and token masks on what a tokenizer really decodes --------------------


@pytest.fixture(scope="module")
def tokenizer():
    from odyssey_core.models.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer(seed=0)


infos = st.one_of(
    st.none(),
    st.just({}),
    legal_lists.map(lambda legal: {"legal_actions": legal}),
    st.just({"legal_actions": None}),
    st.just({"legal_actions": [1, 2, 3]}),
)


def _check_espo(parsed, text: str) -> None:
    """A GUI answer is valid exactly when it has an action and no error; any action read has
    a point of two ints in range; spans lie in text."""
    assert isinstance(parsed, ParsedGuiAnswer)
    assert parsed.valid == (parsed.error is None)
    if parsed.valid:
        assert parsed.action is not None and parsed.action.action in ACTION_TYPES
        assert (parsed.action.point != NO_POINT) == (parsed.action.action in POINTED_ACTIONS)
    if parsed.action is not None:
        x, y = parsed.action.point
        assert type(x) is int and type(y) is int, parsed.action
        assert abs(x) <= MAX_COORDINATE and abs(y) <= MAX_COORDINATE, parsed.action
    for span in (parsed.thought_span, parsed.answer_span):
        assert span is None or 0 <= span[0] <= span[1] <= len(text)


def _check_format(name: str, parsed, info, text: str = "") -> None:
    if name == "odysseus":
        _check_odysseus(parsed, RESPONSE_FORMATS.get(name).space, None)
    elif name == "espo":
        _check_espo(parsed, text)
    else:
        legal = [str(a) for a in (info or {}).get("legal_actions") or ()]
        if legal:
            _check_gtr(parsed, legal, None)
        else:
            assert not parsed.valid and parsed.error in GTR_ERRORS


@MASK_BUDGET
@given(name=st.sampled_from(RESPONSE_FORMATS.names()), text=texts, info=infos, data=st.data())
def test_response_formats_parse_and_mask_anything(tokenizer, name, text, info, data) -> None:
    fmt = RESPONSE_FORMATS.get(name)
    if data.draw(st.booleans()):  # random token ids, decoded as the collector decodes them
        ids = data.draw(st.lists(st.integers(0, len(tokenizer) - 1), max_size=40))
    else:  # the fuzzed text, tokenized
        ids = tokenizer.encode(text, add_special_tokens=False)
    if data.draw(st.booleans()):
        ids = [*ids, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    parsed = fmt.parse(decoded, info)
    if info is None or isinstance(info.get("legal_actions", ()), list | tuple):
        assert parsed.error != "parse_failure", parsed.detail  # a parser bug, caught
    _check_format(name, parsed, info, decoded)
    thought, action = fmt.token_masks(decoded, ids, tokenizer, info)
    assert len(thought) == len(action) == len(ids)
    assert all(isinstance(m, bool) for m in [*thought, *action])
    assert (thought, action) == fmt.token_masks(decoded, ids, tokenizer, info, parsed=parsed)


# -- near-valid answers: each format's structure with hostile values in it -----------------------

OVERFLOWING = '<think>t</think><answer>{"action": "click", "point": [1e999, 5]}</answer>'


@NEAR_BUDGET
@given(text=gui_answers())
@example(text=OVERFLOWING)
@example(text="<think>t</think><answer>{'action': 'type', 'point': [5, -1e999]}</answer>")
def test_espo_parser_reads_near_valid_answers_without_raising(text: str) -> None:
    for parsed in (
        RESPONSE_FORMATS.get("espo").parse(text),
        RESPONSE_FORMATS.get("espo").parse(text, {}),
    ):
        assert not (parsed.error or "").startswith("parse_failure"), parsed.error
        _check_espo(parsed, text)
    # the blocks are what a lazy regex finds: the first of each is the span
    for span, tag in ((parsed.thought_span, "think"), (parsed.answer_span, "answer")):
        found = re.search(f"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
        assert span == (found.span(1) if found else None)
        if parsed.valid:
            assert len(re.findall(f"<{tag}>.*?</{tag}>", text, re.DOTALL)) == 1


@BUDGET
@given(text=gui_answers_with_hostile_point())
@example(text=OVERFLOWING)
def test_espo_never_reads_a_hostile_coordinate_as_a_point(text: str) -> None:
    parsed = RESPONSE_FORMATS.get("espo").parse(text)
    assert not parsed.valid and parsed.action is None
    assert parsed.error.startswith("point must be [x, y] of two finite numbers"), parsed.error


@NEAR_BUDGET
@given(space=spaces, data=st.data())
def test_odysseus_parser_reads_near_valid_answers_without_raising(space, data) -> None:
    text = data.draw(odysseus_answers(space.buttons))
    parsed = RESPONSE_FORMATS.get("odysseus").parse(text) if space == GAMEBOY_SPACE else None
    for result in filter(None, (parsed, parse_response(text, space))):
        assert result.error != "parse_failure", result.detail
        _check_odysseus(result, space, len(text))


@BUDGET
@given(
    token=st.sampled_from([t for t in NUMBER_TOKENS if t != '""']),  # '' is no name: dropped
    button=st.sampled_from(GAMEBOY_SPACE.buttons),
)
def test_odysseus_numbers_are_never_buttons(token: str, button: str) -> None:
    text = f"<reasoning>go</reasoning><answer>['{button}', {token}]</answer>"
    parsed = parse_response(text)
    assert not parsed.valid and parsed.buttons == ()
    assert parsed.error in {"unknown_button", "malformed_answer"}, parsed


@NEAR_BUDGET
@given(legal=legal_lists, data=st.data())
def test_gtr_parser_reads_near_valid_answers_without_raising(legal: list[str], data) -> None:
    text = data.draw(gtr_answers(legal))
    for parsed in (
        parse_gtr_response(text, legal),
        RESPONSE_FORMATS.get("gtr").parse(text, {"legal_actions": legal}),
    ):
        assert parsed.error != "parse_failure", parsed.detail
        _check_gtr(parsed, legal, len(text))


@BUDGET
@given(token=st.sampled_from(NUMBER_TOKENS))
def test_gtr_numbers_are_legal_only_when_listed(token: str) -> None:
    legal = ["hit", "stand"]
    parsed = parse_gtr_response(f'{{"thoughts": "t", "action": {token}}}', legal)
    assert not parsed.valid and parsed.action is None
    assert parsed.error in {"illegal_action", "empty_action"}, parsed

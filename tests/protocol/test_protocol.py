"""Tests for odyssey_core.protocol: action space, answer parsing, prompts."""

from __future__ import annotations

import random
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odyssey_core.protocol import (
    GAMEBOY_BUTTONS,
    GAMEBOY_SPACE,
    PROMPTS,
    ActionSpace,
    FallbackPolicy,
    ParsedResponse,
    build_turn_text,
    format_response,
    get_system_prompt,
    parse_response,
    resolve_action,
)

SPACE = GAMEBOY_SPACE
LEGAL = SPACE.legal_actions()
# Written independently of the parser so the tests check it rather than restate it.
TAG_LIKE = re.compile(r"<\s*/?\s*(perception|reasoning|answer)\s*>", re.IGNORECASE)
THOUGHT = "<perception>Mario on ground</perception><reasoning>jump the gap</reasoning>"
NO_THOUGHT = {"missing_perception", "missing_reasoning"}


def answer(inner: str) -> str:
    return f"{THOUGHT}<answer>{inner}</answer>"


# --------------------------------------------------------------------------- action space


def test_gameboy_buttons() -> None:
    assert GAMEBOY_BUTTONS == ("a", "b", "up", "down", "left", "right", "noop")
    assert SPACE.buttons == GAMEBOY_BUTTONS
    assert SPACE.max_buttons == 2
    assert SPACE.null == "noop"


def test_legal_actions_count_and_noop_rule() -> None:
    assert len(LEGAL) == 1 + 6 + 15 == 22
    assert LEGAL[0] == ("noop",)
    assert len(set(LEGAL)) == 22
    assert len({frozenset(a) for a in LEGAL}) == 22  # no two orderings of one combination
    for action in LEGAL:
        assert 1 <= len(action) <= 2
        assert len(set(action)) == len(action)
        assert "noop" not in action or action == ("noop",)
    assert ("a", "right") in LEGAL
    assert SPACE.legal_actions() == LEGAL  # deterministic
    assert ActionSpace().legal_actions() == LEGAL


@pytest.mark.parametrize(("max_buttons", "count"), [(1, 7), (2, 22), (3, 42)])
def test_legal_actions_other_sizes(max_buttons: int, count: int) -> None:
    assert len(ActionSpace(max_buttons=max_buttons).legal_actions()) == count


def test_legal_actions_returns_a_copy() -> None:
    actions = SPACE.legal_actions()
    actions.clear()
    assert len(SPACE.legal_actions()) == 22


@pytest.mark.parametrize(
    ("given_buttons", "expected"),
    [
        ((), ("noop",)),
        ([], ("noop",)),
        (("noop",), ("noop",)),
        (("noop", "noop"), ("noop",)),
        (("right", "a"), ("right", "a")),
        (("a", "right", "a"), ("a", "right")),
        (("noop", "a"), ("a",)),
        (("a", "noop", "b"), ("a", "b")),
        (("A", " Right "), ("a", "right")),
        ("right", ("right",)),
        (["b", "left", "up"], ("b", "left", "up")),  # count is not normalize's business
    ],
)
def test_normalize(given_buttons, expected) -> None:
    assert SPACE.normalize(given_buttons) == expected


def test_normalize_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="unknown button"):
        SPACE.normalize(["a", "jump"])


def test_canonical_and_is_legal() -> None:
    assert SPACE.canonical(("right", "a")) == ("a", "right")
    assert SPACE.canonical(("right", "a")) in LEGAL
    assert SPACE.is_legal(("right", "a"))
    assert SPACE.is_legal("noop")
    assert not SPACE.is_legal(("noop", "a"))
    assert not SPACE.is_legal(("a", "a"))
    assert not SPACE.is_legal(("a", "b", "left"))
    assert not SPACE.is_legal(())
    assert not SPACE.is_legal(("jump",))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"buttons": ()},
        {"buttons": ("a", "a", "noop")},
        {"buttons": ("A", "noop")},
        {"buttons": ("a", "b")},  # null button missing
        {"max_buttons": 0},
    ],
)
def test_action_space_validation(kwargs) -> None:
    with pytest.raises(ValueError):
        ActionSpace(**kwargs)


def test_action_space_is_hashable_and_frozen() -> None:
    assert hash(ActionSpace(buttons=list(GAMEBOY_BUTTONS))) == hash(SPACE)
    with pytest.raises(AttributeError):
        SPACE.max_buttons = 3  # type: ignore[misc]


def _draw_counts(draw, n: int) -> Counter:
    return Counter(draw() for _ in range(n))


@pytest.mark.parametrize("make_rng", [lambda: random.Random(7), lambda: np.random.default_rng(7)])
def test_random_action_uniform(make_rng) -> None:
    rng = make_rng()
    n = 6600
    counts = _draw_counts(lambda: SPACE.random_action(rng), n)
    assert set(counts) == set(LEGAL)
    expected = n / len(LEGAL)
    assert all(0.7 * expected < c < 1.3 * expected for c in counts.values())
    # Same seed, same sequence.
    a, b = make_rng(), make_rng()
    assert [SPACE.random_action(a) for _ in range(50)] == [
        SPACE.random_action(b) for _ in range(50)
    ]


def test_random_action_rejects_bad_rng() -> None:
    with pytest.raises(TypeError):
        SPACE.random_action(object())


# --------------------------------------------------------------------------- resolve_action


def test_resolve_valid_answer_is_pressed() -> None:
    parsed = parse_response(answer("['right', 'a']"))
    for policy in ("noop", "random", FallbackPolicy.NOOP, FallbackPolicy.RANDOM):
        assert resolve_action(parsed, SPACE, policy, random.Random(0)) == (("right", "a"), False)


@pytest.mark.parametrize("bad", [parse_response("no tags"), parse_response(answer("jump")), None])
def test_resolve_noop_fallback(bad) -> None:
    assert resolve_action(bad, SPACE, "noop") == (("noop",), True)
    assert resolve_action(bad) == (("noop",), True)


def test_resolve_random_fallback_uniform() -> None:
    bad = parse_response(answer("['a', 'b', 'left']"))
    assert not bad.valid
    rng = random.Random(123)
    n = 4400
    draws = [resolve_action(bad, SPACE, FallbackPolicy.RANDOM, rng) for _ in range(n)]
    assert all(used for _, used in draws)
    counts = Counter(buttons for buttons, _ in draws)
    assert set(counts) == set(LEGAL)
    assert all(0.6 * n / 22 < c < 1.4 * n / 22 for c in counts.values())
    # Seeded: reproducible with numpy as well.
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    seq1 = [resolve_action(bad, SPACE, "random", g1)[0] for _ in range(30)]
    seq2 = [resolve_action(bad, SPACE, "random", g2)[0] for _ in range(30)]
    assert seq1 == seq2


def test_resolve_random_needs_rng_and_known_policy() -> None:
    bad = parse_response("")
    with pytest.raises(ValueError):
        resolve_action(bad, SPACE, "random", None)
    with pytest.raises(ValueError):
        resolve_action(bad, SPACE, "explode")


def test_resolve_checks_against_the_given_space() -> None:
    parsed = parse_response(answer("['a', 'right']"))
    one_button = ActionSpace(max_buttons=1)
    assert resolve_action(parsed, one_button, "noop") == (("noop",), True)


# --------------------------------------------------------------------------- parsing: table

# (id, text, valid, buttons, error, exact warnings)
CASES: list[tuple[str, str, bool, tuple[str, ...], str | None, set[str]]] = [
    ("canonical", answer("['a', 'right']"), True, ("a", "right"), None, set()),
    ("json_list", answer('["a","right"]'), True, ("a", "right"), None, set()),
    ("tuple", answer("('a', 'right')"), True, ("a", "right"), None, set()),
    ("bare_comma", answer("a, right"), True, ("a", "right"), None, set()),
    ("bare_space", answer("a right"), True, ("a", "right"), None, set()),
    ("bare_plus", answer("a+right"), True, ("a", "right"), None, set()),
    ("bare_semicolon", answer("a; right"), True, ("a", "right"), None, set()),
    ("bare_pipe", answer(" a | right "), True, ("a", "right"), None, set()),
    ("single_word", answer("right"), True, ("right",), None, set()),
    ("single_list", answer("['right']"), True, ("right",), None, set()),
    ("padded", answer("\n  [ 'b' ,  'left' ]  \n"), True, ("b", "left"), None, set()),
    ("order_kept", answer("['right', 'a']"), True, ("right", "a"), None, set()),
    ("trailing_comma", answer("['a', 'right',]"), True, ("a", "right"), None, set()),
    ("backticks", answer("`a`, `right`"), True, ("a", "right"), None, set()),
    ("curly_single", answer("[‘a’, ’right’]"), True, ("a", "right"), None, {"curly_quotes"}),
    ("curly_double", answer("“a”"), True, ("a",), None, {"curly_quotes"}),
    ("upper_plus", answer("A+RIGHT"), True, ("a", "right"), None, {"case_normalized"}),
    ("mixed_case", answer("['Right']"), True, ("right",), None, {"case_normalized"}),
    ("tag_upper", THOUGHT + "<ANSWER>a</ANSWER>", True, ("a",), None, set()),
    ("tag_spaces", THOUGHT + "< answer >a</ answer >", True, ("a",), None, set()),
    ("tag_newline", THOUGHT + "<\nAnswer\n>a< /answer>", True, ("a",), None, set()),
    ("duplicates", answer("['a', 'a']"), True, ("a",), None, {"duplicate_buttons"}),
    ("noop_alone", answer("['noop']"), True, ("noop",), None, set()),
    ("noop_twice", answer("noop noop"), True, ("noop",), None, {"duplicate_buttons"}),
    ("noop_combined", answer("['noop', 'a']"), True, ("a",), None, {"noop_combined"}),
    ("noop_three", answer("['noop', 'a', 'b']"), True, ("a", "b"), None, {"noop_combined"}),
    ("no_answer", THOUGHT, False, (), "no_answer", set()),
    ("no_tags_at_all", "I would jump.", False, (), "no_answer", NO_THOUGHT | {"text_outside_tags"}),
    ("empty_input", "", False, (), "no_answer", NO_THOUGHT),
    ("close_only", THOUGHT + "a</answer>", False, (), "no_answer", {"text_outside_tags"}),
    ("unclosed_ok", THOUGHT + "<answer>['a']", True, ("a",), None, {"unclosed_answer"}),
    ("unclosed_bare", THOUGHT + "<answer> right\n", True, ("right",), None, {"unclosed_answer"}),
    (
        "unclosed_truncated",
        THOUGHT + "<answer>['a', 'rig",
        False,
        (),
        "malformed_answer",
        {"unclosed_answer"},
    ),
    (
        "multiple_answers",
        answer("a") + "<answer>b</answer>",
        True,
        ("b",),
        None,
        {"multiple_answers", "text_outside_tags"},
    ),
    (
        "multiple_last_invalid",
        answer("a") + "<answer>jump</answer>",
        False,
        (),
        "unknown_button",
        {"multiple_answers", "text_outside_tags"},
    ),
    (
        "nested_open",
        THOUGHT + "<answer>a<answer>b</answer>",
        True,
        ("b",),
        None,
        {"multiple_answers", "text_outside_tags"},
    ),
    ("empty_answer", answer(""), False, (), "empty_answer", set()),
    ("blank_answer", answer("  \n "), False, (), "empty_answer", set()),
    ("empty_list", answer("[]"), False, (), "empty_answer", set()),
    ("blank_list", answer("[ ]"), False, (), "empty_answer", set()),
    ("empty_string_item", answer("['']"), False, (), "empty_answer", set()),
    ("open_bracket", answer("['a', 'right'"), False, (), "malformed_answer", set()),
    ("close_bracket", answer("a]"), False, (), "malformed_answer", set()),
    ("nested_list", answer("[['a']]"), False, (), "malformed_answer", set()),
    ("mismatched", answer("(a]"), False, (), "malformed_answer", set()),
    ("odd_quote", answer("'a"), False, (), "malformed_answer", set()),
    ("odd_double_quote", answer('["a", "right]'), False, (), "malformed_answer", set()),
    ("two_lists", answer("['a']['b']"), False, (), "malformed_answer", set()),
    ("synonym_jump", answer("jump"), False, (), "unknown_button", set()),
    ("unknown_in_list", answer("['a', 'jump']"), False, (), "unknown_button", set()),
    ("none_word", answer("none"), False, (), "unknown_button", set()),
    ("trailing_period", answer("right."), False, (), "unknown_button", set()),
    ("sentence", answer("press a"), False, (), "unknown_button", set()),
    ("start_button", answer("start"), False, (), "unknown_button", set()),
    ("too_many", answer("['a', 'b', 'right']"), False, (), "too_many_buttons", set()),
    ("too_many_bare", answer("a b left right"), False, (), "too_many_buttons", set()),
    (
        "too_many_after_dedupe_ok",
        answer("a, right, a"),
        True,
        ("a", "right"),
        None,
        {"duplicate_buttons"},
    ),
    (
        "missing_perception",
        "<reasoning>r</reasoning><answer>a</answer>",
        True,
        ("a",),
        None,
        {"missing_perception"},
    ),
    (
        "missing_reasoning",
        "<perception>p</perception><answer>a</answer>",
        True,
        ("a",),
        None,
        {"missing_reasoning"},
    ),
    ("answer_only", "<answer>a</answer>", True, ("a",), None, NO_THOUGHT),
    (
        "empty_perception",
        "<perception> </perception><reasoning>r</reasoning><answer>a</answer>",
        True,
        ("a",),
        None,
        {"empty_perception"},
    ),
    (
        "duplicate_reasoning",
        "<perception>p</perception><reasoning>r1</reasoning><reasoning>r2</reasoning>"
        "<answer>a</answer>",
        True,
        ("a",),
        None,
        {"duplicate_reasoning"},
    ),
    (
        "unclosed_perception",
        "<perception>p<reasoning>r</reasoning><answer>a</answer>",
        True,
        ("a",),
        None,
        {"unclosed_perception"},
    ),
    (
        "unclosed_reasoning",
        "<perception>p</perception><reasoning>r\n<answer>a</answer>",
        True,
        ("a",),
        None,
        {"unclosed_reasoning"},
    ),
    (
        "stray_close",
        "<perception>p</perception></perception><reasoning>r</reasoning><answer>a</answer>",
        True,
        ("a",),
        None,
        {"stray_closing_tag", "text_outside_tags"},
    ),
    ("text_before", "Sure! " + answer("a"), True, ("a",), None, {"text_outside_tags"}),
    (
        "text_between",
        "<perception>p</perception> so <reasoning>r</reasoning><answer>a</answer>",
        True,
        ("a",),
        None,
        {"text_outside_tags"},
    ),
    ("text_after", answer("a") + " Done.", True, ("a",), None, {"text_after_answer"}),
    ("thought_after", answer("a") + THOUGHT, True, ("a",), None, {"text_after_answer"}),
    ("whitespace_around", "\n " + answer("a") + " \n", True, ("a",), None, set()),
    (
        "newlines_between",
        THOUGHT.replace("><", ">\n<") + "\n<answer>a</answer>",
        True,
        ("a",),
        None,
        set(),
    ),
    (
        "untagged_thoughts",
        "A pit ahead, I jump. <answer>['a', 'right']</answer>",
        True,
        ("a", "right"),
        None,
        NO_THOUGHT | {"text_outside_tags"},
    ),
    (
        "tags_in_reasoning_prose",
        "<perception>p</perception><reasoning>I will write <answer>b</answer> no, "
        "better:</reasoning><answer>a</answer>",
        True,
        ("a",),
        None,
        {"multiple_answers"},
    ),
]


@pytest.mark.parametrize(
    ("text", "valid", "buttons", "error", "warnings"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_parse_table(text, valid, buttons, error, warnings) -> None:
    result = parse_response(text)
    assert result.valid is valid, result
    assert result.buttons == buttons, result
    assert result.error == error, result
    assert set(result.warnings) == warnings, result
    check_invariants(text, result)


def test_case_ids_unique() -> None:
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    ("value", "expected_error"),
    [
        (None, "no_answer"),
        (42, "no_answer"),
        (3.5, "no_answer"),
        (["<answer>a"], "malformed_answer"),
    ],
)
def test_non_string_input(value, expected_error) -> None:
    result = parse_response(value)
    assert result.error == expected_error


def test_bytes_input() -> None:
    result = parse_response(b"<answer>['a']</answer>")
    assert result.valid and result.buttons == ("a",)


def test_unprintable_object_does_not_raise() -> None:
    class Evil:
        def __str__(self) -> str:
            raise RuntimeError("no")

    result = parse_response(Evil())
    assert not result.valid
    assert result.buttons == ()
    assert result.error == "parse_failure"


def test_detail_names_the_unknown_button() -> None:
    result = parse_response(answer("['a', 'jump']"))
    assert result.detail is not None and "jump" in result.detail


def test_fields_of_canonical_response() -> None:
    text = (
        "<perception> A Goomba ahead. </perception>\n<reasoning>Stomp it.</reasoning>\n"
        "<answer>['a', 'right']</answer>"
    )
    result = parse_response(text)
    assert result.perception == "A Goomba ahead."
    assert result.reasoning == "Stomp it."
    assert result.answer_text == "['a', 'right']"
    assert result.warnings == ()
    assert isinstance(result, ParsedResponse)
    with pytest.raises(AttributeError):
        result.valid = False  # type: ignore[misc]


def test_custom_space() -> None:
    space = ActionSpace(buttons=("jump", "left", "right", "noop"), max_buttons=1)
    assert parse_response("<answer>jump</answer>", space).buttons == ("jump",)
    assert parse_response("<answer>a</answer>", space).error == "unknown_button"
    assert parse_response("<answer>jump right</answer>", space).error == "too_many_buttons"


# --------------------------------------------------------------------------- spans


def test_spans_canonical() -> None:
    text = "<perception>p</perception>\n<reasoning>r</reasoning>\n<answer>['a']</answer>"
    result = parse_response(text)
    s, e = result.thought_span
    assert text[s:e] == "<perception>p</perception>\n<reasoning>r</reasoning>"
    s, e = result.answer_span
    assert text[s:e] == "<answer>['a']</answer>"


def test_spans_with_surrounding_text() -> None:
    text = "Hello.  <REASONING>go</reasoning >  ok  < Answer>b</answer> bye"
    result = parse_response(text)
    assert text[slice(*result.thought_span)] == "<REASONING>go</reasoning >"
    assert text[slice(*result.answer_span)] == "< Answer>b</answer>"


def test_thought_span_untagged_is_trimmed() -> None:
    text = "  \n I see a pit.\n<answer>a</answer>"
    result = parse_response(text)
    assert text[slice(*result.thought_span)] == "I see a pit."


def test_thought_span_none_when_nothing_before_answer() -> None:
    result = parse_response("  <answer>a</answer>")
    assert result.thought_span is None
    assert result.answer_span == (2, 20)


def test_span_unclosed_answer_runs_to_end() -> None:
    text = "<reasoning>r</reasoning><answer>a, right  "
    result = parse_response(text)
    assert result.answer_span == (24, len(text))
    assert result.answer_text == "a, right  "


def test_span_unclosed_thought_is_trimmed() -> None:
    text = "<perception>p</perception><reasoning>r  \n<answer>a</answer>"
    result = parse_response(text)
    assert text[slice(*result.thought_span)] == "<perception>p</perception><reasoning>r"
    assert result.reasoning == "r"


def test_span_last_of_multiple_answers() -> None:
    text = "<answer>a</answer> <answer>b</answer>"
    result = parse_response(text)
    assert text[slice(*result.answer_span)] == "<answer>b</answer>"
    # Text before the chosen block (including the earlier block) is the thought.
    assert text[slice(*result.thought_span)] == "<answer>a</answer>"


def test_thought_after_answer_is_not_in_span() -> None:
    text = "<answer>a</answer><reasoning>late</reasoning>"
    result = parse_response(text)
    assert result.thought_span is None
    assert result.reasoning is None


def test_span_when_no_answer() -> None:
    text = "<perception>p</perception> rambling"
    result = parse_response(text)
    assert result.answer_span is None
    assert text[slice(*result.thought_span)] == "<perception>p</perception>"


# --------------------------------------------------------------------------- format_response


def test_format_response_canonical() -> None:
    text = format_response("p", "r", ["a", "right"])
    assert (
        text
        == "<perception>p</perception>\n<reasoning>r</reasoning>\n<answer>['a', 'right']</answer>"
    )
    assert format_response("p", "r", ("right",), sep="") == (
        "<perception>p</perception><reasoning>r</reasoning><answer>['right']</answer>"
    )
    assert format_response(None, None, ()) == "<answer>['noop']</answer>"


def test_format_response_normalizes_buttons() -> None:
    assert format_response(None, None, ["A", "noop", "a", "b"]).endswith("['a', 'b']</answer>")


@pytest.mark.parametrize(
    ("perception", "reasoning", "buttons", "sep"),
    [
        ("p", "r", ["a", "b", "left"], "\n"),
        ("p", "r", ["jump"], "\n"),
        ("see <answer>x</answer>", "r", ["a"], "\n"),
        ("p", "</ Reasoning >", ["a"], "\n"),
        ("p", "r", ["a"], " and "),
    ],
)
def test_format_response_rejects(perception, reasoning, buttons, sep) -> None:
    with pytest.raises(ValueError):
        format_response(perception, reasoning, buttons, sep=sep)


@pytest.mark.parametrize("action", LEGAL)
def test_round_trip_every_legal_action(action) -> None:
    text = format_response("I see things.", "I plan things.", action)
    result = parse_response(text)
    assert result.valid
    assert result.buttons == action
    assert result.warnings == ()
    assert result.perception == "I see things."
    assert result.reasoning == "I plan things."


# --------------------------------------------------------------------------- properties


def check_invariants(text, result: ParsedResponse, space: ActionSpace = SPACE) -> None:
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    assert isinstance(result, ParsedResponse)
    if result.valid:
        assert result.error is None
        assert 1 <= len(result.buttons) <= space.max_buttons
        assert all(b in space.buttons and b == b.lower() for b in result.buttons)
        assert len(set(result.buttons)) == len(result.buttons)
        assert space.is_legal(result.buttons)
        assert result.answer_span is not None
    else:
        assert result.buttons == ()
        assert isinstance(result.error, str) and result.error
    spans = [sp for sp in (result.thought_span, result.answer_span) if sp is not None]
    for start, end in spans:
        assert 0 <= start <= end <= len(text)
    if result.thought_span is not None:
        start, end = result.thought_span
        assert start < end  # never an empty thought span
    if result.thought_span and result.answer_span:
        assert result.thought_span[1] <= result.answer_span[0]
    if result.answer_span is not None:
        start, end = result.answer_span
        block = text[start:end]
        assert TAG_LIKE.match(block)
        assert result.answer_text is not None and result.answer_text in block
    assert len(set(result.warnings)) == len(result.warnings)
    assert all(isinstance(w, str) for w in result.warnings)


FRAGMENTS = [
    "<answer>",
    "</answer>",
    "< ANSWER >",
    "</ answer>",
    "<perception>",
    "</perception>",
    "<reasoning>",
    "</Reasoning>",
    "<",
    ">",
    "/",
    "[",
    "]",
    "(",
    ")",
    "'",
    '"',
    "‘",
    "”",
    ",",
    "+",
    " ",
    "\n",
    "noop",
    "a",
    "B",
    "right",
    "left",
    "jump",
    "up",
]
messy_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=25).map(
    "".join
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), messy_text))
def test_never_raises_and_invariants_hold(text: str) -> None:
    check_invariants(text, parse_response(text))


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.text(max_size=3))))
def test_never_raises_on_other_types(value) -> None:
    result = parse_response(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    check_invariants(value, result)


free_text = st.text(max_size=40).filter(lambda s: not TAG_LIKE.search(s))

QUOTE_PAIRS = [("'", "'"), ('"', '"'), ("‘", "’"), ("’", "’"), ("“", "”"), ("`", "`"), ("", "")]


@st.composite
def rendered_answer(draw, buttons: list[str]) -> str:
    """One of the accepted spellings of a list of buttons."""

    def cased(name: str) -> str:
        style = draw(st.sampled_from(["lower", "upper", "title"]))
        return {"lower": name, "upper": name.upper(), "title": name.title()}[style]

    names = [cased(b) for b in buttons]
    form = draw(st.sampled_from(["python", "json", "tuple", "comma", "space", "plus", "quoted"]))
    pad = draw(st.sampled_from(["", " ", "\n", "  "]))
    if form == "python":
        left, right = draw(st.sampled_from(QUOTE_PAIRS))
        body = "[" + ", ".join(f"{left}{n}{right}" for n in names) + "]"
    elif form == "json":
        body = "[" + ",".join(f'"{n}"' for n in names) + "]"
    elif form == "tuple":
        body = "(" + ", ".join(f"'{n}'" for n in names) + ")"
    elif form == "comma":
        body = ", ".join(names)
    elif form == "space":
        body = " ".join(names)
    elif form == "plus":
        body = "+".join(names)
    else:
        left, right = draw(st.sampled_from(QUOTE_PAIRS))
        body = ", ".join(f"{left}{n}{right}" for n in names)
    return pad + body + pad


@st.composite
def tag(draw, name: str, closing: bool) -> str:
    ws = st.sampled_from(["", " ", "\n"])
    cased = draw(st.sampled_from([name, name.upper(), name.title()]))
    slash = "/" + draw(ws) if closing else ""
    return f"<{draw(ws)}{slash}{cased}{draw(ws)}>"


@st.composite
def valid_response(draw) -> tuple[str, tuple[str, ...], str | None, str | None]:
    action = draw(st.sampled_from(LEGAL))
    buttons = list(action)
    extra = draw(st.sampled_from(["none", "duplicate", "noop"]))
    if extra == "duplicate":
        buttons.append(buttons[0])
    elif extra == "noop" and action != ("noop",):
        buttons.insert(draw(st.integers(0, len(buttons))), "noop")
    perception = draw(st.one_of(st.none(), free_text))
    reasoning = draw(st.one_of(st.none(), free_text))
    sep = st.sampled_from(["", "\n", " ", "\n\n"])
    parts = []
    for name, value in (("perception", perception), ("reasoning", reasoning)):
        if value is not None:
            parts.append(draw(tag(name, False)) + value + draw(tag(name, True)) + draw(sep))
    inner = draw(rendered_answer(buttons))
    parts.append(draw(tag("answer", False)) + inner + draw(tag("answer", True)))
    text = draw(sep) + "".join(parts) + draw(sep)
    return text, action, perception, reasoning


@settings(max_examples=300, deadline=None)
@given(valid_response())
def test_generated_valid_responses_parse(case) -> None:
    text, action, perception, reasoning = case
    result = parse_response(text)
    assert result.valid, (text, result)
    assert result.buttons == SPACE.normalize(action)
    assert result.perception == (None if perception is None else perception.strip())
    assert result.reasoning == (None if reasoning is None else reasoning.strip())
    assert "text_outside_tags" not in result.warnings
    assert "text_after_answer" not in result.warnings
    check_invariants(text, result)
    if perception is not None or reasoning is not None:
        start, end = result.thought_span
        assert TAG_LIKE.fullmatch(text[start : text.index(">", start) + 1])
        assert text[:end].rstrip().endswith(">")


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(st.none(), free_text),
    st.one_of(st.none(), free_text),
    st.sampled_from(LEGAL),
    st.sampled_from(["", "\n", " "]),
)
def test_format_parse_round_trip(perception, reasoning, action, sep) -> None:
    text = format_response(perception, reasoning, action, sep=sep)
    result = parse_response(text)
    assert result.valid
    assert result.buttons == action
    assert result.perception == (None if perception is None else perception.strip())
    assert result.reasoning == (None if reasoning is None else reasoning.strip())
    assert "text_outside_tags" not in result.warnings
    check_invariants(text, result)


@settings(max_examples=100, deadline=None)
@given(messy_text, messy_text)
def test_garbage_around_a_final_answer_never_changes_buttons(before, after) -> None:
    # Whatever comes before, a closed final answer block decides the buttons, as long as the
    # trailing text opens no new answer block.
    text = before + "<answer>['b', 'left']</answer>" + after
    result = parse_response(text)
    check_invariants(text, result)
    if not re.search(r"<\s*answer\s*>", after, re.IGNORECASE):
        assert result.valid and result.buttons == ("b", "left")


# --------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("game", ["odland", "mario"])
def test_system_prompts(game: str) -> None:
    prompt = get_system_prompt(game)
    assert prompt == PROMPTS[game].render()
    for name in GAMEBOY_BUTTONS:
        assert f"- {name}:" in prompt
    assert "at most two buttons" in prompt
    for tag_text in ("<perception>", "</perception>", "<reasoning>", "<answer>", "</answer>"):
        assert tag_text in prompt
    assert "right" in prompt and "jump" in prompt
    # The worked example in the prompt is itself a valid, warning-free answer.
    example = prompt[prompt.rindex("Example answer:\n") + len("Example answer:\n") :]
    parsed = parse_response(example)
    assert parsed.valid and parsed.warnings == ()
    assert parsed.buttons == PROMPTS[game].example.buttons


def test_mario_prompt_mentions_the_game() -> None:
    prompt = get_system_prompt("Mario")
    for word in ("Super Mario Land", "Mario", "Goomba", "coins"):
        assert word in prompt


def test_odland_prompt_is_not_about_mario() -> None:
    assert "Mario" not in get_system_prompt("odland")
    assert "odland" in get_system_prompt("odland")


def test_unknown_game_lists_known_games() -> None:
    with pytest.raises(ValueError, match=r"known games: mario, odland"):
        get_system_prompt("zelda")


def test_prompt_overrides() -> None:
    base = get_system_prompt("mario")
    assert "Tips:" in base
    no_tips = get_system_prompt("mario", {"tips": []})
    assert "Tips:" not in no_tips
    one = get_system_prompt(
        "mario",
        {"max_buttons": 1, "example": {"perception": "p", "reasoning": "r", "buttons": ["right"]}},
    )
    assert "at most one button " in one
    assert get_system_prompt("mario", {}) == base
    with pytest.raises(ValueError):
        get_system_prompt("mario", {"no_such_field": 1})
    with pytest.raises(ValueError):  # example must fit max_buttons
        get_system_prompt("mario", {"max_buttons": 1})
    with pytest.raises(ValueError):  # button names are validated
        get_system_prompt("mario", {"buttons": {"Jump": "x"}})
    assert PROMPTS["mario"].max_buttons == 2  # presets untouched


def test_build_turn_text() -> None:
    text = build_turn_text("1-1")
    assert "1-1" in text and "button" in text
    with_turn = build_turn_text("2-3", turn=17)
    assert "2-3" in with_turn and "17" in with_turn
    assert build_turn_text("1-1", 0) != text  # turn 0 is still shown

"""The GTR answer format: parsing policy, spans, the random fallback, and never raising."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from odyssey_core.protocol.gtr_format import (
    GTRParsed,
    format_gtr_response,
    parse_gtr_response,
    resolve,
)

LEGAL = ["1", "2", "10", "+", "-", "*", "/", "(", ")", "=", "hit", "stand"]


def test_rl4vlm_json_answer() -> None:
    text = '{"cards": ["Q", "3"], "formula": "10+2", "thoughts": "start with 10", "action": "10"}'
    parsed = parse_gtr_response(text, LEGAL)
    assert parsed.valid and parsed.action == "10" and parsed.error is None
    assert parsed.thought is not None and parsed.thought.startswith('"cards"')
    assert parsed.thought.endswith('"start with 10"')
    start, end = parsed.action_span
    assert text[start:end] == "10"
    assert text[slice(*parsed.thought_span)] == parsed.thought


def test_variants() -> None:
    assert parse_gtr_response("I think so. action: hit", LEGAL).action == "hit"
    p = parse_gtr_response('"Action": "Hit"', LEGAL)
    assert p.action == "hit" and "case_normalized" in p.warnings and p.thought is None
    p = parse_gtr_response("“action”: “+”", LEGAL)
    assert p.action == "+" and "curly_quotes" in p.warnings
    p = parse_gtr_response('"action": "1", later "action": "2"', LEGAL)
    assert p.action == "2" and "multiple_actions" in p.warnings
    assert parse_gtr_response('"action": "3"', LEGAL).error == "illegal_action"
    assert parse_gtr_response('"action": ""', LEGAL).error == "empty_action"
    assert parse_gtr_response("no answer here", LEGAL).error == "no_action"
    assert parse_gtr_response("transaction: 1", LEGAL).error == "no_action"
    assert parse_gtr_response(None, LEGAL).error == "no_action"
    assert parse_gtr_response(b'"action": "="', LEGAL).action == "="
    p = parse_gtr_response('"action": "+', LEGAL)
    assert p.action == "+" and "unclosed_quote" in p.warnings


def test_resolve_falls_back_uniformly_and_reproducibly() -> None:
    bad = parse_gtr_response("garbage", LEGAL)
    good = parse_gtr_response('"action": "*"', LEGAL)
    assert resolve(good, LEGAL, random.Random(0)) == ("*", False)
    first = [resolve(bad, LEGAL, random.Random(7))[0] for _ in range(3)]
    assert len(set(first)) == 1  # same seed, same pick
    rng = np.random.default_rng(0)
    picks = [resolve(bad, LEGAL, rng) for _ in range(1200)]
    assert all(flag for _, flag in picks)
    counts = {a: sum(p == a for p, _ in picks) for a in LEGAL}
    assert min(counts.values()) > 50  # every legal action is drawn
    assert resolve(None, ["x"], rng) == ("x", True)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.binary(), st.none(), st.integers()), st.lists(st.text(), max_size=5))
def test_never_raises(text: object, legal: list[str]) -> None:
    parsed = parse_gtr_response(text, legal)
    assert isinstance(parsed, GTRParsed)
    assert parsed.valid == (parsed.error is None)
    if parsed.valid:
        assert parsed.action in legal


_thoughts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="{},\"'"),
    max_size=60,
).filter(lambda s: "action" not in s.lower())


@settings(max_examples=200, deadline=None)
@given(_thoughts, st.sampled_from(LEGAL))
def test_format_round_trip(thought: str, action: str) -> None:
    parsed = parse_gtr_response(format_gtr_response(thought, action), LEGAL)
    assert parsed.valid and parsed.action == action
    assert (parsed.thought or "") == thought.strip()

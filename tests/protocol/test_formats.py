"""Response formats: parsing through RESPONSE_FORMATS and the thought/action token masks."""

from __future__ import annotations

import itertools

import pytest

from odyssey_core.protocol import (
    GAMEBOY_SPACE,
    RESPONSE_FORMATS,
    ActionSpace,
    GTRFormat,
    OdysseusFormat,
    ResponseFormat,
    format_response,
    parse_response,
    token_char_offsets,
)
from odyssey_core.protocol.gtr_format import format_gtr_response, parse_gtr_response


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny checkpoints' tokenizer (``build_tiny_model`` builds the same one)."""
    from odyssey_core.models.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer(seed=0)


def _tokens(tokenizer, ids: list[int], mask: list[bool]) -> str:
    return "".join(tokenizer.decode([i]) for i, m in zip(ids, mask, strict=True) if m)


def _eot(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_registry_holds_both_formats() -> None:
    assert RESPONSE_FORMATS.names() == ["espo", "gtr", "odysseus"]
    assert isinstance(RESPONSE_FORMATS.get("odysseus"), OdysseusFormat)
    assert isinstance(RESPONSE_FORMATS.get("gtr"), GTRFormat)
    for name in RESPONSE_FORMATS:
        fmt = RESPONSE_FORMATS.get(name)
        assert isinstance(fmt, ResponseFormat) and fmt.name == name


# -- odysseus ---------------------------------------------------------------------------------


def test_odysseus_parses_like_parse_response() -> None:
    fmt = RESPONSE_FORMATS.get("odysseus")
    for text in [
        format_response("A gap.", "Jump.", ("a", "right")),
        "<answer>['b', 'up', 'left']</answer>",
        "nothing here",
        None,
    ]:
        assert fmt.parse(text) == parse_response(text)
        assert fmt.parse(text, {"level": "1-1"}) == parse_response(text)
    one_button = OdysseusFormat(ActionSpace(GAMEBOY_SPACE.buttons, max_buttons=1))
    assert one_button.parse("<answer>['a', 'right']</answer>").error == "too_many_buttons"


def test_odysseus_masks_on_a_canonical_answer(tokenizer) -> None:
    fmt = RESPONSE_FORMATS.get("odysseus")
    text = format_response("A gap is ahead.", "Jump right now.", ("a", "right"))
    ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    parsed = fmt.parse(text)
    thought, action = fmt.token_masks(text, ids, tokenizer)
    assert (thought, action) == fmt.token_masks(text, ids, tokenizer, {}, parsed=parsed)
    assert len(thought) == len(action) == len(ids)
    assert not thought[-1] and not action[-1]  # the eos token is neither
    # The answer block starts and ends on token boundaries; the thought's last token also
    # carries the newline that separates it from the answer.
    start, end = parsed.thought_span
    assert _tokens(tokenizer, ids, thought).rstrip("\n") == text[start:end]
    start, end = parsed.answer_span
    assert _tokens(tokenizer, ids, action) == text[start:end] == "<answer>['a', 'right']</answer>"
    assert not any(t and a for t, a in zip(thought, action, strict=True))


def test_odysseus_masks_with_a_non_canonical_split(tokenizer) -> None:
    """A sampled token sequence need not be the tokenizer's own split of the text."""
    fmt = RESPONSE_FORMATS.get("odysseus")
    text = "note <reasoning>go</reasoning> <answer>['b']</answer> bye"
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(ch)[0]) for ch in text]
    assert ids != tokenizer(text, add_special_tokens=False)["input_ids"]
    assert token_char_offsets(text, ids, tokenizer) == [(i, i + 1) for i in range(len(text))]
    thought, action = fmt.token_masks(text, ids, tokenizer)
    assert (
        "".join(c for c, m in zip(text, thought, strict=True) if m) == "<reasoning>go</reasoning>"
    )
    assert "".join(c for c, m in zip(text, action, strict=True) if m) == "<answer>['b']</answer>"


def test_odysseus_masks_without_an_answer(tokenizer) -> None:
    fmt = RESPONSE_FORMATS.get("odysseus")
    text = "I am not sure what to do"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    thought, action = fmt.token_masks(text, ids, tokenizer)
    assert all(thought) and not any(action)


def test_special_tokens_get_an_empty_offset_at_the_end(tokenizer) -> None:
    text = "<answer>a</answer>"
    ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], _eot(tokenizer)]
    offsets = token_char_offsets(text, ids, tokenizer)
    assert offsets[-1] == (len(text), len(text)) and offsets[0][0] == 0
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(offsets))


def test_gtr_parses_against_the_turns_legal_actions() -> None:
    fmt = RESPONSE_FORMATS.get("gtr")
    text = format_gtr_response('"target": 3, "thoughts": "go up"', "+")
    info = {"legal_actions": ["+", "-"], "target": 3}
    assert fmt.parse(text, info) == parse_gtr_response(text, ["+", "-"])
    assert fmt.parse(text, info).valid and fmt.parse(text, info).action == "+"
    for missing in (None, {}):  # no legal actions: the same spans, but not a legal action
        parsed = fmt.parse(text, missing)
        assert not parsed.valid and parsed.error == "illegal_action"
        assert parsed.thought_span == fmt.parse(text, info).thought_span
    assert fmt.parse("Hit", {"legal_actions": ["hit", "stand"]}).error == "no_action"


# Expected masks of ``gtr/trainer.py:response_token_masks`` (the function this format replaces),
# recorded on the tiny tokenizer: the ids, then T = thought, A = action per token; ``eot``:
# ``<|im_end|>`` appended.
GTR_CASES = [
    (  # the case of test_gtr_trainer's lambda-weighting test
        '"target": 2, "thoughts": "up",\n"action": "+"',
        True,
        (
            "15 97 328 631 15 39 234 31 25 234 15 770 498 317 96 15 39 234 15 369 15 25 212 "
            "15 766 285 15 39 234 15 24 15 2"
        ),
        "TTTTTTTTTTTTTTTTTTTTTAAAAAAAAAAAA",
    ),
    (  # no action key: every token is thought
        "no key here",
        False,
        "91 92 234 88 82 102 462",
        "TTTTTTT",
    ),
    (  # no action key, then end of turn: the eot starts at the end of the text, so is action
        "no key here",
        True,
        "91 92 234 88 82 102 462 2",
        "TTTTTTTA",
    ),
    (  # a key but no thought: everything is action
        '"action": "-"',
        True,
        "15 766 285 15 39 234 15 26 15 2",
        "AAAAAAAAAA",
    ),
    (  # RL4VLM's JSON answer, an illegal action (7): the spans, not the legality, decide
        '{"cards": ["Q", "3"], "thoughts": "add", "action": "7"}',
        True,
        (
            "104 15 80 397 96 15 39 234 72 15 62 15 25 234 15 32 15 74 25 234 15 770 498 "
            "317 96 15 39 234 15 400 81 15 25 234 15 766 285 15 39 234 15 36 15 106 2"
        ),
        "TTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTAAAAAAAAAAAAA",
    ),
    (  # curly quotes, a bare thought
        "thinking... \u201caction\u201d: \u201chit\u201d",
        True,
        (
            "770 273 88 274 27 27 27 234 172 236 264 766 285 172 236 265 39 234 172 236 264 "
            "85 870 172 236 265 2"
        ),
        "TTTTTTTAAAAAAAAAAAAAAAAAAAA",
    ),
]


@pytest.mark.parametrize(("text", "eot", "recorded_ids", "expected"), GTR_CASES)
def test_gtr_masks_match_the_trainers_old_masks(
    tokenizer, text: str, eot: bool, recorded_ids: str, expected: str
) -> None:
    ids = [int(i) for i in recorded_ids.split()]
    encoded = tokenizer.encode(text, add_special_tokens=False) + ([_eot(tokenizer)] if eot else [])
    assert encoded == ids, "the tiny tokenizer changed: record the cases again"
    fmt = RESPONSE_FORMATS.get("gtr")
    info = {"legal_actions": ["+", "-", "hit", "stand"]}
    thought, action = fmt.token_masks(text, ids, tokenizer, info)
    assert "".join("T" if t else "A" for t in thought) == expected
    assert action == [not t for t in thought]
    for other in (None, {}):  # the masks do not depend on the legal actions
        assert fmt.token_masks(text, ids, tokenizer, other) == (thought, action)
    parsed = fmt.parse(text, info)
    assert fmt.token_masks(text, ids, tokenizer, info, parsed=parsed) == (thought, action)


def test_gtr_masks_split_thought_and_action_text(tokenizer) -> None:
    fmt = RESPONSE_FORMATS.get("gtr")
    text = '"target": 2, "thoughts": "up",\n"action": "+"'
    ids = [*tokenizer.encode(text, add_special_tokens=False), _eot(tokenizer)]
    thought, action = fmt.token_masks(text, ids, tokenizer, {"legal_actions": ["+", "-"]})
    kept = tokenizer.decode([i for i, m in zip(ids, thought, strict=True) if m])
    assert kept.strip().startswith('"target": 2, "thoughts": "up"')
    assert '"action": "+"' in tokenizer.decode([i for i, m in zip(ids, action, strict=True) if m])
    assert all(t != a for t, a in zip(thought, action, strict=True))


def test_gtr_masks_on_a_non_canonical_split(tokenizer) -> None:
    """One token per character: the thought is exactly the characters before its end."""
    fmt = RESPONSE_FORMATS.get("gtr")
    text = 'Hold on 18. "action": "stand"'
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(ch)[0]) for ch in text]
    thought, action = fmt.token_masks(text, ids, tokenizer, {"legal_actions": ["hit", "stand"]})
    assert "".join(c for c, m in zip(text, thought, strict=True) if m) == "Hold on 18."
    assert "".join(c for c, m in zip(text, action, strict=True) if m) == ' "action": "stand"'

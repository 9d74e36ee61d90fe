"""The ``espo`` response format: parse_gui_answer through RESPONSE_FORMATS, and its masks."""

from __future__ import annotations

import pytest

from odyssey_core.protocol.formats import RESPONSE_FORMATS, EspoFormat, ResponseFormat
from odyssey_core.protocol.gui import GuiAction, format_gui_answer, parse_gui_answer

THOUGHT = "The search box is at the top."
CLICK = GuiAction("click", (120, 340))


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny checkpoints' tokenizer (``build_tiny_model`` builds the same one)."""
    from odyssey_core.models.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer(seed=0)


def _kept(tokenizer, ids: list[int], mask: list[bool]) -> str:
    return "".join(tokenizer.decode([i]) for i, m in zip(ids, mask, strict=True) if m)


def test_espo_is_registered() -> None:
    fmt = RESPONSE_FORMATS.get("espo")
    assert isinstance(fmt, EspoFormat) and isinstance(fmt, ResponseFormat)
    assert fmt.name == "espo"


def test_espo_parses_like_parse_gui_answer() -> None:
    fmt = RESPONSE_FORMATS.get("espo")
    texts = [
        format_gui_answer(CLICK, THOUGHT),
        format_gui_answer(GuiAction("recommendation", input_text="Yes"), "It fits."),
        "<answer>{'action': 'recommendation', 'point': [-100, -100], 'input_text': 'Maybe'}"
        "</answer>",
        "no tags at all",
        None,
    ]
    for text in texts:
        assert fmt.parse(text) == parse_gui_answer(text)
        assert fmt.parse(text, {"stage": "search"}) == parse_gui_answer(text)
    assert fmt.parse(texts[0]).valid and fmt.parse(texts[0]).action == CLICK
    assert not fmt.parse(texts[2]).valid


def test_espo_masks_on_a_canonical_answer(tokenizer) -> None:
    fmt = RESPONSE_FORMATS.get("espo")
    text = format_gui_answer(CLICK, THOUGHT)
    ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    parsed = fmt.parse(text)
    thought, action = fmt.token_masks(text, ids, tokenizer)
    assert (thought, action) == fmt.token_masks(text, ids, tokenizer, {}, parsed=parsed)
    assert len(thought) == len(action) == len(ids)
    assert not thought[-1] and not action[-1]  # the eos token is neither
    # The tiny tokenizer glues ">" to "The" and "." to "</": those tokens overlap the
    # thought's content, so they are thought; "<", "th", "in", "k" of the tags are not.
    assert _kept(tokenizer, ids, thought) == ">" + THOUGHT + "</"
    start, end = parsed.answer_span
    assert _kept(tokenizer, ids, action) == text[start:end]
    assert text[start:end] == (
        '{"action": "click", "point": [120, 340], "input_text": "no input text"}'
    )
    assert not any(t and a for t, a in zip(thought, action, strict=True))


def test_espo_masks_with_a_non_canonical_split(tokenizer) -> None:
    """One token per character: the masks are exactly the blocks' contents."""
    fmt = RESPONSE_FORMATS.get("espo")
    text = 'x <think>go</think> <answer>{"action": "exit"}</answer> y'
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(ch)[0]) for ch in text]
    assert ids != tokenizer(text, add_special_tokens=False)["input_ids"]
    thought, action = fmt.token_masks(text, ids, tokenizer)
    assert "".join(c for c, m in zip(text, thought, strict=True) if m) == "go"
    assert "".join(c for c, m in zip(text, action, strict=True) if m) == '{"action": "exit"}'


def test_espo_masks_without_blocks(tokenizer) -> None:
    fmt = RESPONSE_FORMATS.get("espo")
    text = "I would click the search box"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    thought, action = fmt.token_masks(text, ids, tokenizer)
    assert not any(thought) and not any(action)
    only_answer = '<answer>{"action": "scroll down"}</answer>'
    ids = tokenizer(only_answer, add_special_tokens=False)["input_ids"]
    thought, action = fmt.token_masks(only_answer, ids, tokenizer)
    assert not any(thought)
    assert _kept(tokenizer, ids, action) == '{"action": "scroll down"}'

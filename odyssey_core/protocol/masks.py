"""Where each response token sits in the response text, and per-token masks from char spans.

A response format reports character spans (the thought, the action); trainers want them per
token, e.g. to weight the action tokens differently or to apply a format loss on the thought.

Character offsets come from the fast tokenizer's offset mapping when re-tokenizing the text
gives back exactly the sampled ids (the usual case). A model may sample a non-canonical
split of the same text; then offsets are rebuilt by decoding growing prefixes of the ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["span_token_masks", "token_char_offsets", "token_start_offsets"]

Span = tuple[int, int]


def token_char_offsets(
    response_text: str, response_ids: Sequence[int], tokenizer: Any
) -> list[tuple[int, int]]:
    """``[start, end)`` character offsets of each token in ``response_text``.

    Special tokens (such as the final ``<|im_end|>``) are not part of the decoded text and get
    an empty span at the end of the text.
    """
    ids = [int(i) for i in response_ids]
    special = set(getattr(tokenizer, "all_special_ids", []))
    content = [i for i in ids if i not in special]

    offsets: list[tuple[int, int]] | None = None
    encoded = tokenizer(response_text, add_special_tokens=False, return_offsets_mapping=True)
    if list(encoded["input_ids"]) == content:
        offsets = [tuple(pair) for pair in encoded["offset_mapping"]]
    else:
        # Non-canonical tokenization: each token ends where the decoded prefix ends. A token
        # that completes a multi-byte character may extend past the previous end; clamp so
        # offsets never go backwards.
        offsets = []
        start = 0
        for k in range(1, len(content) + 1):
            prefix = tokenizer.decode(content[:k], skip_special_tokens=True)
            end = max(start, min(len(prefix), len(response_text)))
            offsets.append((start, end))
            start = end

    result: list[tuple[int, int]] = []
    it = iter(offsets)
    end_of_text = len(response_text)
    for token_id in ids:
        result.append((end_of_text, end_of_text) if token_id in special else next(it))
    return result


def token_start_offsets(response_ids: Sequence[int], tokenizer: Any) -> list[int]:
    """The character offset where each token starts in the decoded response: the length of
    the decoded prefix before it (special tokens skipped)."""
    ids = [int(i) for i in response_ids]
    return [len(tokenizer.decode(ids[:k], skip_special_tokens=True)) for k in range(len(ids))]


def _overlaps(token: Span, span: Span | None) -> bool:
    if span is None:
        return False
    start, end = token
    return start < end and start < span[1] and end > span[0]


def span_token_masks(
    offsets: Sequence[Span], thought_span: Span | None, action_span: Span | None
) -> tuple[list[bool], list[bool]]:
    """``(thought_mask, action_mask)``: a token is in a span when its characters overlap it
    (empty tokens, such as a final special token, are in neither)."""
    thought = [_overlaps(o, thought_span) for o in offsets]
    action = [_overlaps(o, action_span) for o in offsets]
    return thought, action

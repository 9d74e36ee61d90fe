"""Parse (and write) the agent's per-turn answer format.

The model answers each turn with three tagged blocks::

    <perception>what it sees</perception>
    <reasoning>what it plans</reasoning>
    <answer>['a', 'right']</answer>

``parse_response`` never raises. It returns a ``ParsedResponse`` whose ``valid`` flag says
whether the answer names a legal action; ``error`` is a short reason code when it does not,
and ``warnings`` lists non-fatal departures from the canonical format, so a format reward can
be as strict as the trainer wants while the environment stays lenient about what it presses.

Policy
------
Tags are ``<perception>``, ``<reasoning>`` and ``<answer>`` (plus closing forms). They match
case-insensitively and with whitespace (including newlines) around the name or the slash:
``<ANSWER>``, ``< answer >`` and ``</ answer>`` all count. Nothing else is a tag.

The answer block is chosen first: it starts at the *last* opening answer tag (the model's
final word) and ends at the first closing answer tag after it, or at the end of the text.
Perception and reasoning are read only from the text *before* that block, so the thought
span always ends before the answer span starts.

Answer content: curly quotes and backticks are read as plain quotes; one outer pair of
``[...]`` or ``(...)`` is removed; the rest is split on whitespace, ``,``, ``;``, ``+``,
``|``, ``/`` and ``&`` and stripped of quotes; each piece is lowercased and must be a button
name of the action space exactly (no synonyms: ``jump``, ``none``, ``right.`` are unknown).

=============================================  =======  =====================================
Input case                                     Valid    Result / error / warnings
=============================================  =======  =====================================
canonical three blocks, ``['a', 'right']``     yes      ``("a", "right")``, no warnings
JSON list ``["a","right"]``                    yes      same buttons, no warnings
tuple ``('a', 'right')``                       yes      same buttons, no warnings
bare ``a, right`` / ``a right`` / ``a+right``  yes      same buttons, no warnings
backtick-quoted names                          yes      same buttons, no warnings
single word ``right`` or ``['right']``         yes      ``("right",)``
curly quotes ``[‘a’, ’right’]``, ``“a”``       yes      warning ``curly_quotes``
upper/mixed case ``A+RIGHT``                   yes      lowercased; ``case_normalized``
tag case/spacing ``<ANSWER>``, ``< answer >``  yes      accepted, no warning
repeated button ``['a', 'a']``                 yes      ``("a",)``; ``duplicate_buttons``
``noop`` with a button ``['noop', 'a']``       yes      ``("a",)``; ``noop_combined``
``noop`` alone                                 yes      ``("noop",)``
3 buttons, one of them ``noop``                yes      noop dropped first, then counted
no ``<answer>`` opening tag                    no       ``no_answer``
``<answer>`` with no ``</answer>``             yes*     rest of text is the answer; warning
                                                        ``unclosed_answer`` (*if it parses)
several answer blocks                          (last)   last block used; ``multiple_answers``
empty answer, ``[]``, ``['']``, only spaces    no       ``empty_answer``
unbalanced brackets or quotes (truncation)     no       ``malformed_answer``
nested brackets ``[['a']]``, ``['a']['b']``    no       ``malformed_answer``
a name that is not a button (``jump``)         no       ``unknown_button`` (never dropped)
more than ``max_buttons`` distinct buttons     no       ``too_many_buttons``
missing perception / reasoning block           (any)    field ``None``; ``missing_perception``
                                                        / ``missing_reasoning``
empty perception / reasoning block             (any)    field ``""``; ``empty_perception`` /
                                                        ``empty_reasoning``
perception / reasoning given twice             (any)    first kept; ``duplicate_perception``
                                                        / ``duplicate_reasoning``
thought block never closed                     (any)    ends at next tag or the answer;
                                                        ``unclosed_perception`` /
                                                        ``unclosed_reasoning``
closing thought tag with no matching opener    (any)    ``stray_closing_tag``
non-blank text before the answer, outside      (any)    ignored; ``text_outside_tags``
  thought blocks (also untagged thoughts)
non-blank text after the answer block          (any)    ignored; ``text_after_answer``
``None`` / non-string input                    --       ``None`` -> ``""``, bytes decoded as
                                                        UTF-8, others via ``str()``
str() of the input raises (or a parser bug)    no       ``parse_failure``
=============================================  =======  =====================================

Spans are ``[start, end)`` offsets into the (coerced) input string:

* ``answer_span`` covers the whole chosen answer block including its tags (to the end of the
  text when unclosed).
* ``thought_span`` runs from the first opening perception/reasoning tag before the answer to
  the end of the last thought block (its closing tag, or its trimmed content when unclosed).
  Without thought tags it covers the non-blank text before the answer, with surrounding
  whitespace trimmed. When there is no answer block, the whole text plays the role of "text
  before the answer". ``None`` when there is nothing.

Invariants: ``valid`` implies 1..max_buttons legal, lowercase, distinct buttons and
``error is None``; not ``valid`` implies ``buttons == ()`` and ``error`` set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from odyssey_core.protocol.actions import GAMEBOY_SPACE, ActionSpace

__all__ = ["ParsedResponse", "format_response", "parse_response"]

_TAG_RE = re.compile(r"<\s*(/?)\s*(perception|reasoning|answer)\s*>", re.IGNORECASE)

# Typographic quotes seen in model output; all read as a plain quote.
_CURLY_QUOTES = "‘’‚‛“”„‟′″«»‹›"
_QUOTE_CHARS = "'\"`"
_CURLY_TABLE = str.maketrans({c: "'" for c in _CURLY_QUOTES})
_SEPARATORS_RE = re.compile(r"[\s,;+|/&]+")
_BRACKETS = {"[": "]", "(": ")"}
_BRACKET_CHARS = "[]()"


@dataclass(frozen=True)
class ParsedResponse:
    """The outcome of parsing one model turn; see the module docstring for the policy."""

    buttons: tuple[str, ...]
    valid: bool
    perception: str | None = None
    reasoning: str | None = None
    answer_text: str | None = None
    thought_span: tuple[int, int] | None = None
    answer_span: tuple[int, int] | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    detail: str | None = None  # human-readable context for ``error`` (e.g. the unknown name)


class _Tag(NamedTuple):
    start: int
    end: int
    closing: bool
    name: str


class _Block(NamedTuple):
    kind: str
    start: int  # opening tag start
    content_start: int
    content_end: int
    end: int  # closing tag end, or content_end when unclosed
    closed: bool


class _Warnings:
    """An ordered set of warning codes (first occurrence wins)."""

    def __init__(self) -> None:
        self._items: dict[str, None] = {}

    def add(self, code: str) -> None:
        self._items.setdefault(code, None)

    def as_tuple(self) -> tuple[str, ...]:
        return tuple(self._items)


def coerce_text(text: Any) -> str:
    """Any model output as text: None is empty, bytes are decoded as UTF-8, the rest str()."""
    if text is None:
        return ""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes | bytearray):
        return bytes(text).decode("utf-8", errors="replace")
    return str(text)


def _find_tags(text: str) -> list[_Tag]:
    return [
        _Tag(m.start(), m.end(), bool(m.group(1)), m.group(2).lower())
        for m in _TAG_RE.finditer(text)
    ]


def _strip_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The sub-span of ``text[start:end]`` without surrounding whitespace; None if blank."""
    chunk = text[start:end]
    stripped = chunk.strip()
    if not stripped:
        return None
    lead = len(chunk) - len(chunk.lstrip())
    return start + lead, start + lead + len(stripped)


def _parse_thoughts(text: str, tags: list[_Tag], limit: int, warns: _Warnings) -> list[_Block]:
    """Perception/reasoning blocks in ``text[:limit]``; lenient about missing closers."""
    blocks: list[_Block] = []
    current: tuple[str, int, int] | None = None  # kind, tag start, content start
    for tag in tags:
        if tag.start >= limit or tag.name == "answer":
            continue
        if not tag.closing:
            if current is not None:  # a new block begins before the old one closed
                kind, start, cstart = current
                blocks.append(_Block(kind, start, cstart, tag.start, tag.start, False))
                warns.add(f"unclosed_{kind}")
            current = (tag.name, tag.start, tag.end)
        elif current is not None and current[0] == tag.name:
            kind, start, cstart = current
            blocks.append(_Block(kind, start, cstart, tag.start, tag.end, True))
            current = None
        else:
            warns.add("stray_closing_tag")
    if current is not None:
        kind, start, cstart = current
        blocks.append(_Block(kind, start, cstart, limit, limit, False))
        warns.add(f"unclosed_{kind}")
    return blocks


def _thought_span(text: str, blocks: list[_Block], limit: int) -> tuple[int, int] | None:
    if not blocks:
        return _strip_span(text, 0, limit)
    last = blocks[-1]
    if last.closed:
        end = last.end
    else:  # trim trailing whitespace of an unclosed block, never before its opening tag
        end = last.content_start + len(text[last.content_start : last.content_end].rstrip())
    return blocks[0].start, end


def _text_outside(text: str, blocks: list[_Block], limit: int) -> bool:
    """Whether non-blank text before ``limit`` lies outside every thought block."""
    pos = 0
    for block in blocks:
        if text[pos : block.start].strip():
            return True
        pos = block.end
    return bool(text[pos:limit].strip())


def _parse_answer(
    raw: str, space: ActionSpace, warns: _Warnings
) -> tuple[tuple[str, ...], str | None, str | None]:
    """Buttons, error code and detail for the inside of an answer block."""
    content = raw.translate(_CURLY_TABLE)
    if content != raw:
        warns.add("curly_quotes")
    content = content.strip()
    if not content:
        return (), "empty_answer", None
    opener = content[0]
    if opener in _BRACKETS:
        if content[-1] != _BRACKETS[opener]:
            return (), "malformed_answer", f"{opener!r} is never closed"
        content = content[1:-1]
    if any(c in _BRACKET_CHARS for c in content):
        return (), "malformed_answer", "unbalanced or nested brackets"
    for quote in _QUOTE_CHARS:
        if content.count(quote) % 2:
            return (), "malformed_answer", f"unbalanced {quote} quote"
    for quote in _QUOTE_CHARS:
        content = content.replace(quote, " ")
    pieces = [p for p in _SEPARATORS_RE.split(content) if p]
    if not pieces:
        return (), "empty_answer", None
    names: list[str] = []
    unknown: list[str] = []
    for piece in pieces:
        name = piece.lower()
        if name != piece:
            warns.add("case_normalized")
        if name in space.buttons:
            names.append(name)
        else:
            unknown.append(piece)
    if unknown:
        shown = ", ".join(repr(u[:20]) for u in unknown[:5])
        return (), "unknown_button", f"not buttons: {shown}"
    if len(set(names)) != len(names):
        warns.add("duplicate_buttons")
    buttons = space.normalize(names)
    if len(buttons) < len(set(names)):
        warns.add("noop_combined")
    if len(buttons) > space.max_buttons:
        return (), "too_many_buttons", f"{len(buttons)} buttons, at most {space.max_buttons}"
    return buttons, None, None


def _parse(text: str, space: ActionSpace) -> ParsedResponse:
    warns = _Warnings()
    tags = _find_tags(text)
    answer_opens = [t for t in tags if t.name == "answer" and not t.closing]

    answer_span: tuple[int, int] | None = None
    answer_text: str | None = None
    limit = len(text)  # thoughts are read from text[:limit]
    if answer_opens:
        opening = answer_opens[-1]
        if len(answer_opens) > 1:
            warns.add("multiple_answers")
        closing = next(
            (t for t in tags if t.name == "answer" and t.closing and t.start >= opening.end),
            None,
        )
        if closing is None:
            warns.add("unclosed_answer")
            answer_span = (opening.start, len(text))
            answer_text = text[opening.end :]
        else:
            answer_span = (opening.start, closing.end)
            answer_text = text[opening.end : closing.start]
            if text[closing.end :].strip():
                warns.add("text_after_answer")
        limit = opening.start

    blocks = _parse_thoughts(text, tags, limit, warns)
    fields: dict[str, str | None] = {"perception": None, "reasoning": None}
    for kind in fields:
        found = [b for b in blocks if b.kind == kind]
        if not found:
            warns.add(f"missing_{kind}")
            continue
        if len(found) > 1:
            warns.add(f"duplicate_{kind}")
        value = text[found[0].content_start : found[0].content_end].strip()
        if not value:
            warns.add(f"empty_{kind}")
        fields[kind] = value
    if _text_outside(text, blocks, limit):
        warns.add("text_outside_tags")
    thought_span = _thought_span(text, blocks, limit)

    if answer_text is None:
        buttons: tuple[str, ...] = ()
        error: str | None = "no_answer"
        detail: str | None = None
    else:
        buttons, error, detail = _parse_answer(answer_text, space, warns)

    return ParsedResponse(
        buttons=buttons if error is None else (),
        valid=error is None,
        perception=fields["perception"],
        reasoning=fields["reasoning"],
        answer_text=answer_text,
        thought_span=thought_span,
        answer_span=answer_span,
        error=error,
        warnings=warns.as_tuple(),
        detail=detail,
    )


def parse_response(text: Any, space: ActionSpace = GAMEBOY_SPACE) -> ParsedResponse:
    """Parse one model turn. Never raises; see the module docstring for the policy."""
    try:
        return _parse(coerce_text(text), space)
    except Exception as exc:  # a parser bug must not crash a rollout worker
        return ParsedResponse(
            buttons=(), valid=False, error="parse_failure", detail=f"{type(exc).__name__}: {exc}"
        )


def format_response(
    perception: str | None,
    reasoning: str | None,
    buttons: tuple[str, ...] | list[str] | str,
    *,
    space: ActionSpace = GAMEBOY_SPACE,
    sep: str = "\n",
) -> str:
    """Write a turn in the canonical format (``None`` omits a thought block).

    Texts are stripped and buttons normalized, so ``parse_response`` of the result gives back
    exactly those texts and buttons. Raises ``ValueError`` on an illegal action, on texts that
    contain a protocol tag, or on a ``sep`` that is not whitespace.
    """
    if sep.strip():
        raise ValueError(f"sep must be whitespace, got {sep!r}")
    action = space.normalize(buttons)
    if not space.is_legal(action):
        raise ValueError(f"illegal action {action!r} (at most {space.max_buttons} buttons)")
    parts: list[str] = []
    for kind, value in (("perception", perception), ("reasoning", reasoning)):
        if value is None:
            continue
        if _TAG_RE.search(value):
            raise ValueError(f"{kind} text must not contain protocol tags")
        parts.append(f"<{kind}>{value.strip()}</{kind}>")
    listed = ", ".join(f"'{name}'" for name in action)
    parts.append(f"<answer>[{listed}]</answer>")
    return sep.join(parts)

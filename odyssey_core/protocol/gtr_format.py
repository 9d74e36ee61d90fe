"""The GTR / RL4VLM answer format: a free-form thought, then ``"action": "<a>"``.

Example answer for Points24::

    {"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2",
     "thoughts": "The formula is empty, so I start with 10.", "action": "10"}

Policy (``parse_gtr_response`` never raises):

* The action is the *last* ``action: value`` pair in the text. The key may be quoted with
  double, single or curly quotes, or bare; the value is read up to its closing quote, or, when
  unquoted, up to a comma, brace, bracket or line end. Matching against ``legal_actions`` is
  exact after stripping whitespace, then case-insensitive (``"Hit"`` -> ``"hit"``; warning
  ``case_normalized``).
* The thought is the text before that key, with surrounding whitespace and an opening ``{``
  or a trailing ``,`` / ``{`` removed. ``thought_span`` and ``action_span`` are ``[start, end)``
  offsets into the (coerced) input; the action span covers the value only.
* Errors: ``no_action`` (no key), ``empty_action``, ``illegal_action`` (a value that is not a
  legal action; ``detail`` shows it), ``parse_failure`` (a parser bug, caught).

``resolve`` implements GTR's fallback (its Eq. 1): a valid answer plays its action, anything
else a uniformly random legal action drawn from the given rng, flagged so it can be counted.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from odyssey_core.protocol.parsing import coerce_text

__all__ = ["GTRParsed", "format_gtr_response", "parse_gtr_response", "resolve"]

_CURLY = str.maketrans({c: '"' for c in "“”„‟″"} | {c: "'" for c in "‘’‚‛′"})
_KEY_RE = re.compile(r"""["']?\baction\b["']?\s*:\s*""", re.IGNORECASE)
_BARE_END = re.compile(r"[,}\]\n\r]")


@dataclass(frozen=True)
class GTRParsed:
    """One parsed answer; ``valid`` means ``action`` is one of the legal actions."""

    action: str | None
    valid: bool
    thought: str | None = None
    thought_span: tuple[int, int] | None = None
    action_span: tuple[int, int] | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    detail: str | None = None


def _thought(text: str, end: int) -> tuple[str | None, tuple[int, int] | None]:
    start, stop = 0, end
    # Trim whitespace and the JSON punctuation around the thought (``{`` before, ``,`` after).
    while start < stop and (text[start].isspace() or text[start] == "{"):
        start += 1
    while stop > start and (text[stop - 1].isspace() or text[stop - 1] in ",{"):
        stop -= 1
    if start >= stop:
        return None, None
    return text[start:stop], (start, stop)


def _parse(text: str, legal: Sequence[str]) -> GTRParsed:
    # Curly quotes are swapped one-for-one, so offsets into ``norm`` are offsets into ``text``.
    norm = text.translate(_CURLY)
    warnings: list[str] = []
    if norm != text:
        warnings.append("curly_quotes")
    keys = list(_KEY_RE.finditer(norm))
    if not keys:
        thought, span = _thought(text, len(text))
        return GTRParsed(None, False, thought, span, None, "no_action", tuple(warnings))
    if len(keys) > 1:
        warnings.append("multiple_actions")
    key = keys[-1]
    thought, tspan = _thought(text, key.start())
    pos = key.end()
    if pos < len(norm) and norm[pos] in "\"'":
        quote = norm[pos]
        close = norm.find(quote, pos + 1)
        if close < 0:
            warnings.append("unclosed_quote")
            line_end = _BARE_END.search(norm, pos + 1)
            close = line_end.start() if line_end else len(norm)
        vstart, vend = pos + 1, close
    else:
        end = _BARE_END.search(norm, pos)
        vstart, vend = pos, end.start() if end else len(norm)
    raw = text[vstart:vend]
    value = raw.strip()
    lead = len(raw) - len(raw.lstrip())
    aspan = (vstart + lead, vstart + lead + len(value)) if value else (vstart, vend)
    if not value:
        return GTRParsed(None, False, thought, tspan, aspan, "empty_action", tuple(warnings))
    if value in legal:
        return GTRParsed(value, True, thought, tspan, aspan, None, tuple(warnings))
    folded = {str(a).lower(): a for a in legal}
    if value.lower() in folded:
        warnings.append("case_normalized")
        return GTRParsed(folded[value.lower()], True, thought, tspan, aspan, None, tuple(warnings))
    return GTRParsed(
        None, False, thought, tspan, aspan, "illegal_action", tuple(warnings), repr(value[:40])
    )


def parse_gtr_response(text: Any, legal_actions: Sequence[str]) -> GTRParsed:
    """Parse one answer against the legal actions. Never raises."""
    try:
        legal = [str(a) for a in legal_actions]
        return _parse(coerce_text(text), legal)
    except Exception as exc:  # a parser bug must not take a rollout worker down
        return GTRParsed(None, False, error="parse_failure", detail=f"{type(exc).__name__}: {exc}")


def resolve(
    parsed: GTRParsed | None, legal_actions: Sequence[str], rng: random.Random | Any
) -> tuple[str, bool]:
    """``(action, used_fallback)``: the parsed action if valid, else a uniform random one.

    ``rng`` is a ``random.Random`` or a ``numpy.random.Generator`` (seeded by the caller, so
    rollouts stay reproducible).
    """
    legal = [str(a) for a in legal_actions]
    if not legal:
        raise ValueError("no legal actions to choose from")
    if parsed is not None and parsed.valid and parsed.action in legal:
        return parsed.action, False
    if hasattr(rng, "integers"):
        index = int(rng.integers(len(legal)))
    elif hasattr(rng, "randrange"):
        index = rng.randrange(len(legal))
    else:
        raise TypeError(f"rng must be random.Random or numpy Generator, got {type(rng)!r}")
    return legal[index], True


def format_gtr_response(thought: str, action: str) -> str:
    """Write an answer that ``parse_gtr_response`` reads back as ``(thought, action)``."""
    if '"' in action or "\n" in action:
        raise ValueError(f"action must not contain quotes or newlines: {action!r}")
    body = thought.strip().rstrip(",").strip()
    return f'{body},\n"action": "{action}"' if body else f'"action": "{action}"'

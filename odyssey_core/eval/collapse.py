"""A thought-collapse monitor (GTR's "thought collapse": thoughts lose diversity, turn
state-irrelevant and stop matching the actions they come with).

Per batch of responses, each with the frame it answered (or that frame's hash):

* ``valid_rate``: share of answers that parse to a legal action.
* ``distinct_1`` / ``distinct_2``: distinct n-grams / all n-grams of the reasoning texts,
  tokens lowercased alphanumeric runs.
* ``duplicate_share``: share of turns (with reasoning) whose reasoning is identical or
  near-identical (token-set Jaccard >= ``near_duplicate_jaccard``, after normalisation) to
  the reasoning of another turn answering a *different* frame: the same thought for
  different states. Exact duplicates are found for every turn; near-duplicates are searched
  among the first ``max_pairwise`` distinct texts (the pairwise check is quadratic).
* ``agreement``: share of turns with a valid answer and a reasoning where the reasoning
  names every answered button, by the words in ``button_words`` (``a`` is "jump", ``b`` is
  "run", ``right``/``left``, ...; the bare letters are no evidence, "a" being an article).
* ``thought_tokens``: mean whitespace tokens of perception plus reasoning.

:meth:`CollapseReport.warnings` lists the thresholds of :class:`CollapseSettings` crossed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from odyssey_core.config import StrictModel
from odyssey_core.protocol import ParsedResponse, parse_response

__all__ = [
    "DEFAULT_BUTTON_WORDS",
    "CollapseReport",
    "CollapseSettings",
    "collapse_from_turns",
    "collapse_metrics",
]

DEFAULT_BUTTON_WORDS: dict[str, tuple[str, ...]] = {
    "a": ("jump", "jumps", "jumping", "hop", "leap", "bounce"),
    "b": ("run", "runs", "running", "dash", "sprint", "speed", "fireball", "shoot"),
    "right": ("right", "forward", "forwards", "ahead", "advance"),
    "left": ("left", "back", "backward", "backwards", "retreat"),
    "up": ("up", "climb", "enter"),
    "down": ("down", "crouch", "duck", "pipe"),
    "noop": ("wait", "stay", "stop", "nothing", "idle", "pause", "noop"),
}

_TOKEN_RE = re.compile(r"[a-z0-9]+")


class CollapseSettings(StrictModel):
    """Thresholds for :meth:`CollapseReport.warnings` and the matching vocabulary."""

    min_valid_rate: float = Field(default=0.9, ge=0, le=1)
    min_distinct_1: float = Field(default=0.1, ge=0, le=1)
    min_distinct_2: float = Field(default=0.2, ge=0, le=1)
    max_duplicate_share: float = Field(default=0.3, ge=0, le=1)
    near_duplicate_jaccard: float = Field(default=0.9, gt=0, le=1)
    min_agreement: float = Field(default=0.5, ge=0, le=1)
    min_thought_tokens: float = Field(default=8.0, ge=0)
    max_pairwise: int = Field(default=2000, ge=2, description="distinct texts compared pairwise")
    button_words: dict[str, tuple[str, ...]] = Field(
        default_factory=lambda: dict(DEFAULT_BUTTON_WORDS)
    )


def tokens(text: str | None) -> list[str]:
    """Lowercase alphanumeric tokens (the normalisation every metric here uses)."""
    return _TOKEN_RE.findall((text or "").lower())


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams / all n-grams over ``texts`` (NaN when there is none)."""
    grams: list[tuple[str, ...]] = []
    for text in texts:
        words = tokens(text)
        grams.extend(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return len(set(grams)) / len(grams) if grams else float("nan")


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _duplicate_flags(
    reasonings: Sequence[str], frames: Sequence[str], threshold: float, max_pairwise: int
) -> list[bool]:
    """Per turn: is its reasoning (near-)identical to one answering a different frame?"""
    normal = [" ".join(tokens(r)) for r in reasonings]
    frames_of: dict[str, set[str]] = {}
    for text, frame in zip(normal, frames, strict=True):
        frames_of.setdefault(text, set()).add(frame)
    # near-duplicates among distinct texts: a text is flagged for frames of its neighbours
    texts = list(frames_of)[:max_pairwise]
    sets = [frozenset(t.split()) for t in texts]
    neighbours: dict[str, set[str]] = {t: set() for t in frames_of}
    if threshold < 1.0:
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                if jaccard(sets[i], sets[j]) >= threshold:
                    neighbours[texts[i]] |= frames_of[texts[j]]
                    neighbours[texts[j]] |= frames_of[texts[i]]
    flags = []
    for text, frame in zip(normal, frames, strict=True):
        others = (frames_of[text] | neighbours[text]) - {frame}
        flags.append(bool(others))
    return flags


def agrees(
    reasoning: str | None, buttons: Sequence[str], words: Mapping[str, Sequence[str]]
) -> bool:
    """Does ``reasoning`` name every button of the answer (by the words for that button)?"""
    said = set(tokens(reasoning))
    return all(said & set(words.get(button, (button,))) for button in buttons)


@dataclass
class CollapseReport:
    """The metrics of one batch and the settings they are judged by."""

    metrics: dict[str, float]
    settings: CollapseSettings = field(default_factory=CollapseSettings)

    def warnings(self) -> list[str]:
        """One line per crossed threshold (NaN metrics are not judged)."""
        s, m = self.settings, self.metrics
        checks = [
            ("valid_rate", "<", s.min_valid_rate, "few answers are valid actions"),
            ("distinct_1", "<", s.min_distinct_1, "reasoning vocabulary has collapsed"),
            ("distinct_2", "<", s.min_distinct_2, "reasoning phrases repeat"),
            ("duplicate_share", ">", s.max_duplicate_share, "same thought for different frames"),
            ("agreement", "<", s.min_agreement, "reasoning does not name the buttons answered"),
            ("thought_tokens", "<", s.min_thought_tokens, "thoughts are very short"),
        ]
        out = []
        for key, op, limit, what in checks:
            value = m.get(key, float("nan"))
            if np.isnan(value):
                continue
            if (op == "<" and value < limit) or (op == ">" and value > limit):
                out.append(f"{key} = {value:.3f} {op} {limit:g}: {what}")
        return out


def collapse_metrics(
    responses: Sequence[str | ParsedResponse],
    frames: Sequence[np.ndarray | str],
    settings: CollapseSettings | None = None,
) -> CollapseReport:
    """Metrics of a batch: ``responses`` (raw text or parsed) and, aligned, the frames they
    answered (arrays or frame hashes)."""
    from odyssey_core.eval.runner import frame_hash

    settings = settings or CollapseSettings()
    if len(responses) != len(frames):
        raise ValueError(f"{len(responses)} responses but {len(frames)} frames")
    parsed = [r if isinstance(r, ParsedResponse) else parse_response(r) for r in responses]
    hashes = [f if isinstance(f, str) else frame_hash(f) for f in frames]
    n = len(parsed)
    with_reasoning = [i for i, p in enumerate(parsed) if tokens(p.reasoning)]
    reasonings = [parsed[i].reasoning or "" for i in with_reasoning]
    flags = _duplicate_flags(
        reasonings,
        [hashes[i] for i in with_reasoning],
        settings.near_duplicate_jaccard,
        settings.max_pairwise,
    )
    judged = [i for i in with_reasoning if parsed[i].valid]
    agreeing = [
        agrees(parsed[i].reasoning, parsed[i].buttons, settings.button_words) for i in judged
    ]
    lengths = [len(((p.perception or "") + " " + (p.reasoning or "")).split()) for p in parsed]
    nan = float("nan")
    metrics = {
        "turns": float(n),
        "valid_rate": sum(p.valid for p in parsed) / n if n else nan,
        "distinct_1": distinct_n(reasonings, 1),
        "distinct_2": distinct_n(reasonings, 2),
        "duplicate_share": sum(flags) / len(flags) if flags else nan,
        "agreement": sum(agreeing) / len(agreeing) if agreeing else nan,
        "thought_tokens": sum(lengths) / n if n else nan,
        "distinct_frames": float(len(set(hashes))),
    }
    return CollapseReport(metrics, settings)


def collapse_from_turns(
    turns: Sequence[Any], settings: CollapseSettings | None = None
) -> CollapseReport:
    """Metrics from the runner's :class:`~odyssey_core.eval.runner.TurnRecord` objects (turns
    without a model answer, e.g. the expert's, are skipped)."""
    answered = [t for t in turns if t.text is not None]
    return collapse_metrics([t.text for t in answered], [t.frame_hash for t in answered], settings)

"""What every GTR corrector shares: the :class:`Correction` it returns, the
:class:`EpisodeMemory` a caller keeps per episode, the :class:`Corrector` interface, and the
readings of a card-game thought (the cards and the formula it states) and the verdict text the
programmatic correctors write."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from odyssey_core.envs.base import Observation
from odyssey_core.protocol.gtr_format import format_gtr_response, parse_gtr_response

__all__ = [
    "FORMULA_GAMES",
    "Correction",
    "Corrector",
    "EpisodeMemory",
    "JudgingCorrector",
    "StepToCorrect",
    "claimed_cards",
    "claimed_formula",
    "rank_of",
    "verdict_text",
]

FORMULA_GAMES = ("points24", "ezpoints")


@dataclass(frozen=True)
class Correction:
    """A corrector's verdict on one step."""

    evaluation: str
    corrected_thought: str
    solvable: bool | None
    agrees: bool
    source: str
    action: str | None = None  # the next action the corrected thought leads to, when known
    target_formula: str | None = None
    valid: bool = True  # False: the corrector gave no usable answer ("no correction")
    details: dict[str, Any] = field(default_factory=dict)
    # True: the thought was judged correct and not rewritten; corrected_thought (and action)
    # are then the agent's own (GTR App. C: "correction: None if the thought is correct")
    thought_kept: bool = False

    def as_response(self) -> str | None:
        """The corrected thought followed by its action, in the agent's answer format."""
        if not self.valid or not self.corrected_thought or self.action is None:
            return None
        return format_gtr_response(self.corrected_thought, self.action)


@dataclass
class EpisodeMemory:
    """What a corrector carries across the steps of one episode; the caller makes a fresh one
    at every episode start (the GTR wrapper does) and passes it to every ``correct`` call.

    ``target_formula`` is the formula the corrections steer toward (GTR App. C's "[Target
    Formula]", "NOT DETERMINED" until a correction picks one): later steps are judged against
    it while the typed formula can still become it.
    """

    target_formula: str | None = None
    steps: int = 0


@dataclass(frozen=True)
class StepToCorrect:
    """One step a :class:`JudgingCorrector` judges: the frame and text the agent saw, its
    thought ("" when it gave none), the action it chose and the env's step info."""

    observation: Observation
    thought: str
    action: str | None
    info: Mapping[str, Any]


class Corrector(ABC):
    """Judges ``(frame, thought, action)`` for one step; ``info`` is the env's step info and
    ``memory`` the episode's :class:`EpisodeMemory` (None: every step on its own).

    ``oracle`` is True for correctors that read the game's hidden state (the programmatic
    ones): their corrections are exact, unlike the paper's VLM corrector's, and reports of a
    model they trained say so.
    """

    source: str = ""
    oracle: bool = False

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()  # what metrics() reports

    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction:
        """The correction of one step: what the agent saw, its thought (None: it gave none),
        the action it chose and the env's step info."""
        return self.correct_step(StepToCorrect(observation, thought or "", action, info), memory)

    @abstractmethod
    def correct_step(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        """The correction of ``step`` (:meth:`correct`'s arguments as one value)."""

    def correct_response(
        self,
        observation: Observation,
        response: str,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction:
        """Parse a raw agent answer, then correct its thought."""
        parsed = parse_gtr_response(response, info.get("legal_actions", ()))
        thought = (
            parsed.thought if parsed.thought is not None else ("" if parsed.valid else response)
        )
        return self.correct(observation, thought, parsed.action, info, memory)

    def metrics(self) -> dict[str, int]:
        return dict(self._counts)

    def checked(
        self,
        parts: list[str],
        agrees: bool,
        corrected_thought: str,
        *,
        solvable: bool | None,
        action: str | None,
        details: dict[str, Any],
        target_formula: str | None = None,
    ) -> Correction:
        """The correction of a programmatic check: ``parts`` (each question asked of the
        thought, with its answer) and the verdict as its evaluation, this corrector its
        source."""
        return Correction(
            evaluation=verdict_text(parts, agrees),
            corrected_thought=corrected_thought,
            solvable=solvable,
            agrees=agrees,
            source=self.source,
            action=action,
            target_formula=target_formula,
            details=details,
        )

    def keep_if_correct(
        self, correction: Correction, thought: str | None, action: str | None
    ) -> Correction:
        """GTR App. C, "correction: None if the thought is correct": a valid verdict that the
        thought is right leaves the agent's own thought (and action) in place of a rewrite."""
        own = (thought or "").strip()
        if not (correction.valid and correction.agrees and own):
            return correction
        self._counts["kept"] += 1
        return replace(
            correction,
            corrected_thought=own,
            action=action if action is not None else correction.action,
            thought_kept=True,
        )


class JudgingCorrector(Corrector):
    """A corrector that judges each step itself (:meth:`judge`); ``correct_step`` counts the step
    (``corrections``, ``memory.steps``), and of a valid verdict whether it agrees, and keeps
    the agent's own thought where the verdict says it is right."""

    def correct_step(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        self._counts["corrections"] += 1
        if memory is not None:
            memory.steps += 1
        result = self.judge(step, memory)
        if not result.valid:
            return result
        self._counts["agreements" if result.agrees else "disagreements"] += 1
        return self.keep_if_correct(result, step.thought, step.action)

    @abstractmethod
    def judge(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        """The verdict on ``step``; ``memory`` (when given) already counts it."""


# ------------------------------------------------------------------------ reading the thought
_RANK_RE = re.compile(r"\b(10|[2-9]|[ajqk]|ace|jack|queen|king|ten)(?![a-z])", re.IGNORECASE)
_WORD_RANK = {"ace": "A", "jack": "J", "queen": "Q", "king": "K", "ten": "10"}


def rank_of(token: str) -> str | None:
    """The card rank a token names (``"10"``, ``"K"``, ``"queen"`` -> ``"Q"``), or None."""
    match = _RANK_RE.search(token.strip().strip("\"'"))
    if match is None:
        return None
    word = match.group(1).lower()
    return _WORD_RANK.get(word, word.upper())


def claimed_cards(thought: str) -> list[str] | None:
    """Ranks listed in a ``"cards": [...]`` field of the thought (``None`` when absent)."""
    match = re.search(r"cards?[\"']?\s*[:=]\s*\[([^\]]*)\]", thought or "", re.IGNORECASE)
    if match is None:
        return None
    ranks = [rank_of(piece) for piece in match.group(1).split(",") if piece.strip()]
    return [r for r in ranks if r is not None]


def claimed_formula(thought: str) -> str | None:
    """The ``"formula": "..."`` the thought aims for, without a trailing ``= 24``."""
    match = re.search(r"formula[\"']?\s*[:=]\s*[\"']([^\"']*)[\"']", thought or "", re.IGNORECASE)
    if match is None:
        return None
    return match.group(1).split("=")[0].strip() or None


def verdict_text(parts: list[str], agrees: bool) -> str:
    """A programmatic corrector's ``evaluation``: its findings, then the verdict."""
    return "; ".join(parts) + f". Verdict: {'CORRECT' if agrees else 'INCORRECT'}."

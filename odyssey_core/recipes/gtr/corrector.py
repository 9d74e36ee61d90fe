"""Thought correctors for GTR: judge the agent's thought each step and write a better one.

Correctors share one interface (:class:`Corrector`):

* ``openai`` (the paper's: GPT-4o with a 24-solver tool, temperature 0.4, 600 tokens, GTR
  Table 2 and App. C) asks any OpenAI-compatible VLM, given the frame, the current formula,
  the agent's thought and the episode's target formula, GTR's questions (the cards, the
  cards the thought names, the formula it aims for, whether the action moves toward it). The
  model may call a ``solve24`` tool, which runs our exact solver. Its answer is a JSON object;
  a malformed one gets one retry with a reminder and is then treated as "no correction"
  (``Correction.valid`` is False), counted in ``metrics()``.
* ``programmatic`` reads the env's privileged state from ``info`` and uses the exact solver:
  an **oracle** (``Corrector.oracle``), whose corrections are always right. Tests and CPU runs
  use it; a report of a model it trained says so.
* ``alfworld`` (:mod:`odyssey_core.recipes.gtr.alfworld_corrector`), the planner-backed oracle
  for ALFWorld.

A thought judged correct is not rewritten (App. C: "correction: None if the thought is
correct"): ``agrees`` is True, ``thought_kept`` too, and ``corrected_thought`` is the agent's
own thought, which thought cloning then keeps. A trainer adds ``corrected_thought`` to the
cloning set only when ``valid``; ``solvable is False`` is the signal to truncate the episode
(see :mod:`odyssey_core.recipes.gtr.rewards`). What a corrector carries from step to step of
one episode (the target formula the paper's prompt hands back) lives in an
:class:`EpisodeMemory` that the caller keeps per episode.

A preset names a corrector and its arguments (``rollout.corrector``); :func:`build_corrector`
resolves them, reading the settings that come from the environment, and fails with an error
that names a missing setting before any work starts.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import Field, ValidationError

from odyssey_core.common.redaction import redact_uri
from odyssey_core.common.registry import Registry
from odyssey_core.config import StrictModel
from odyssey_core.envs.base import Observation
from odyssey_core.envs.cards.render import RANKS, card_value
from odyssey_core.envs.cards.solver import (
    ALL_OPERATORS,
    completions,
    evaluate_tokens,
    solve,
    tokenize,
    uses_numbers,
)
from odyssey_core.protocol.gtr_format import format_gtr_response, parse_gtr_response

__all__ = [
    "CORRECTORS",
    "CORRECTOR_SETTINGS",
    "NO_CORRECTOR",
    "Correction",
    "Corrector",
    "CorrectorConfigError",
    "EpisodeMemory",
    "NoArguments",
    "NoisyCorrectorSettings",
    "NoisyProgrammaticCorrector",
    "OpenAICorrector",
    "OpenAICorrectorSettings",
    "ProgrammaticCorrector",
    "basic_strategy",
    "build_corrector",
    "check_corrector",
    "describe_corrector",
    "make_corrector",
    "solve24_tool",
    "split_corrector_spec",
    "validate_corrector_kwargs",
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


def _compact(formula: str | None) -> str:
    return re.sub(r"\s+", "", formula or "")


def _still_reachable(target_formula: str | None, current: str) -> bool:
    """The typed formula is a prefix of the target formula (so it can still become it)."""
    target = _compact(target_formula)
    return bool(target) and target.startswith(_compact(current))


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

    @abstractmethod
    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction: ...

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


# ------------------------------------------------------------------------ reading the thought
_RANK_RE = re.compile(r"\b(10|[2-9]|[ajqk]|ace|jack|queen|king|ten)(?![a-z])", re.IGNORECASE)
_WORD_RANK = {"ace": "A", "jack": "J", "queen": "Q", "king": "K", "ten": "10"}


def _rank_of(token: str) -> str | None:
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
    ranks = [_rank_of(piece) for piece in match.group(1).split(",") if piece.strip()]
    return [r for r in ranks if r is not None]


def claimed_formula(thought: str) -> str | None:
    """The ``"formula": "..."`` the thought aims for, without a trailing ``= 24``."""
    match = re.search(r"formula[\"']?\s*[:=]\s*[\"']([^\"']*)[\"']", thought or "", re.IGNORECASE)
    if match is None:
        return None
    return match.group(1).split("=")[0].strip() or None


def _claimed_number(thought: str, word: str) -> int | None:
    match = re.search(rf"{word}[\"']?\D{{0,12}}?(\d+)", thought or "", re.IGNORECASE)
    return int(match.group(1)) if match else None


def basic_strategy(player_total: int, usable_ace: bool, dealer_rank: str) -> str:
    """A simplified basic strategy (no doubling/splitting): ``"hit"`` or ``"stand"``."""
    dealer = 11 if dealer_rank == "A" else card_value(dealer_rank)
    if usable_ace:
        if player_total >= 19:
            return "stand"
        if player_total == 18:
            return "stand" if dealer <= 8 else "hit"
        return "hit"
    if player_total >= 17:
        return "stand"
    if player_total <= 11:
        return "hit"
    if player_total == 12:
        return "stand" if 4 <= dealer <= 6 else "hit"
    return "stand" if dealer <= 6 else "hit"


def _verdict(parts: list[str], agrees: bool) -> str:
    return "; ".join(parts) + f". Verdict: {'CORRECT' if agrees else 'INCORRECT'}."


# ------------------------------------------------------------------------------ programmatic
class ProgrammaticCorrector(Corrector):
    """Ground-truth corrections from the env's privileged state and the exact solver (an
    oracle). A thought is judged correct only when it states what the game asks (the cards and
    the formula; the numbers; the total), states it right, and the action follows from it."""

    source = "programmatic"
    oracle = True

    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction:
        game = info.get("game")
        self._counts["corrections"] += 1
        thought = thought or ""
        if memory is not None:
            memory.steps += 1
        if game in FORMULA_GAMES:
            result = self._formula(thought, action, info, memory)
        elif game == "numberline":
            result = self._numberline(thought, action, info)
        elif game == "blackjack":
            result = self._blackjack(thought, action, info)
        else:
            raise ValueError(f"the programmatic corrector does not know the game {game!r}")
        self._counts["agreements" if result.agrees else "disagreements"] += 1
        return self.keep_if_correct(result, thought, action)

    def _formula(
        self,
        thought: str,
        action: str | None,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction:
        cards = [str(c)[:-1] for c in info["cards"]]  # "QS" -> "Q"
        values = [int(v) for v in info["card_values"]]
        target = int(info["target"])
        ops = tuple(info.get("operators", ALL_OPERATORS))
        parens = bool(info.get("parentheses", True))
        prefix = list(info.get("formula_tokens", tokenize(info.get("formula", ""))))
        current = "".join(prefix)
        parts: list[str] = []

        read = claimed_cards(thought)
        cards_ok: bool | None = None
        if read is None:
            parts.append("cards: not stated")
        else:
            cards_ok = Counter(card_value(r) for r in read) == Counter(values)
            parts.append(
                "cards: read correctly"
                if cards_ok
                else f"cards: misread ({', '.join(read) or 'none'} vs {', '.join(cards)})"
            )

        complete = evaluate_tokens(prefix) == target and Counter(uses_numbers(prefix)) == Counter(
            values
        )
        ways = completions(prefix, values, target, ops, parens)
        solvable_now = complete or bool(ways)

        def reaches(tokens: tuple[str, ...]) -> bool:
            return (
                evaluate_tokens(tokens) == target
                and Counter(uses_numbers(tokens)) == Counter(values)
                and tokens[: len(prefix)] == tuple(prefix)
            )

        proposed = claimed_formula(thought)
        formula_ok: bool | None = None
        plan: tuple[str, ...] | None = None
        if proposed is not None:
            p_tokens = tuple(tokenize(proposed))
            formula_ok = reaches(p_tokens)
            parts.append(
                f"formula {proposed!r}: "
                + ("reaches the target from here" if formula_ok else "is not a reachable solution")
            )
            if formula_ok:
                plan = p_tokens
        else:
            parts.append("formula: not stated")
        if plan is None and memory is not None and memory.target_formula:
            kept = tuple(tokenize(memory.target_formula))
            if reaches(kept):  # the episode's target formula, while it can still be reached
                plan = kept
        if plan is None and ways:
            plan = ways[0]  # the shortest way to finish what is already typed

        nexts = {w[len(prefix)] if len(w) > len(prefix) else "=" for w in ways}
        if complete:
            nexts.add("=")
        expected = "=" if complete else (plan[len(prefix)] if plan else None)
        action_ok: bool | None = None
        if solvable_now:
            action_ok = action in nexts
            parts.append(f"action {action!r}: " + ("on track" if action_ok else "off track"))
        else:
            parts.append("action: no action can reach the target any more")
        # correct = every question answered, and right (an unstated reading is not correct)
        agrees = cards_ok is True and formula_ok is True and action_ok is True and solvable_now

        shown_cards = ", ".join(json.dumps(c) for c in cards)
        numbers = ", ".join(str(v) for v in values)
        if not info.get("solvable", True):
            why = f"No formula using {numbers} once each makes {target}, so this deal is lost."
        elif not solvable_now:
            why = (
                f"The formula so far, '{current}', can no longer be finished to make {target} "
                "with the numbers left."
            )
        elif complete:
            why = f"The formula '{current}' already uses every card and makes {target}, so '='."
        else:
            assert plan is not None and expected is not None
            where = f"The formula so far is '{current}'" if current else "The formula is empty"
            why = (
                f"The cards are worth {numbers}. {where}; it can become "
                f"'{''.join(plan)}' = {target}, so the next step is '{expected}'."
            )
        target_formula = "".join(plan) if plan and solvable_now else None
        if memory is not None:
            memory.target_formula = target_formula
        corrected = (
            f'"cards": [{shown_cards}], "formula": "{target_formula or ""}", "thoughts": "{why}"'
        )
        return Correction(
            evaluation=_verdict(parts, agrees),
            corrected_thought=corrected,
            solvable=solvable_now,
            agrees=agrees,
            source=self.source,
            action=expected if solvable_now else None,
            target_formula=target_formula,
            details={"cards_ok": cards_ok, "formula_ok": formula_ok, "action_ok": action_ok},
        )

    def _numberline(self, thought: str, action: str | None, info: Mapping[str, Any]) -> Correction:
        target, current = int(info["target"]), int(info["current"])
        said_target, said_current = (
            _claimed_number(thought, "target"),
            _claimed_number(thought, "current"),
        )
        read_ok: bool | None = None
        parts = []
        if said_target is None and said_current is None:
            parts.append("numbers: not stated")
        else:
            read_ok = said_target in (None, target) and said_current in (None, current)
            parts.append("numbers: read correctly" if read_ok else "numbers: misread")
        expected = "=" if current == target else ("+" if current < target else "-")
        action_ok = action == expected
        parts.append(f"action {action!r}: " + ("moves toward the target" if action_ok else "wrong"))
        agrees = read_ok is True and action_ok
        side = "below" if current < target else "above"
        why = (
            f"The current number {current} is {side} the target {target}, so I press '{expected}'."
        )
        corrected = f'"target": {target}, "current": {current}, "thoughts": "{why}"'
        return Correction(
            evaluation=_verdict(parts, agrees),
            corrected_thought=corrected,
            solvable=True,
            agrees=agrees,
            source=self.source,
            action=expected,
            details={"cards_ok": read_ok, "action_ok": action_ok},
        )

    def _blackjack(self, thought: str, action: str | None, info: Mapping[str, Any]) -> Correction:
        total, usable = int(info["player_total"]), bool(info["usable_ace"])
        dealer = str(info["dealer_visible"])[:-1]
        player = [str(c)[:-1] for c in info["player_cards"]]
        said_total = _claimed_number(thought, "total")
        read_ok = None if said_total is None else said_total == total
        parts = [
            "total: not stated"
            if read_ok is None
            else ("total: read correctly" if read_ok else f"total: misread ({said_total})")
        ]
        expected = basic_strategy(total, usable, dealer)
        action_ok = action == expected
        parts.append(f"action {action!r}: " + ("sound" if action_ok else "against basic strategy"))
        agrees = read_ok is True and action_ok
        soft = " (an ace counted as 11)" if usable else ""
        why = (
            f"My cards {', '.join(player)} total {total}{soft} and the dealer shows {dealer}; "
            f"basic strategy says {expected}."
        )
        shown = ", ".join(json.dumps(c) for c in player)
        corrected = (
            f'"dealer": "{dealer}", "player": [{shown}], "total": {total}, "thoughts": "{why}"'
        )
        return Correction(
            evaluation=_verdict(parts, agrees),
            corrected_thought=corrected,
            solvable=None,
            agrees=agrees,
            source=self.source,
            action=expected,
            details={"cards_ok": read_ok, "action_ok": action_ok},
        )


# ------------------------------------------------------------------------ noisy programmatic
NOISY_ERROR_KINDS = ("approved_wrong_thought", "misread", "wrong_action")


class NoisyProgrammaticCorrector(Corrector):
    """The programmatic oracle with a VLM corrector's mistakes injected: not an oracle.

    Each call asks :class:`ProgrammaticCorrector` for the exact verdict, then with probability
    ``error_rate`` (one draw per call from a generator seeded with ``seed``, so the same calls
    get the same corrections) replaces it with a wrong one of the kinds a VLM corrector makes:

    * ``approved_wrong_thought``: a wrong thought judged correct and kept (only when the
      agent's thought is wrong and names a legal action);
    * ``misread``: the right rewrite around a wrong reading (a card rank, the target or current
      number, the hand's total);
    * ``wrong_action``: a rewrite that leads to a different legal action, its stated next step
      changed to match (a right thought judged wrong gets this or a misread; a lost deal gets
      this one, as if the corrector saw a way on).

    Every injected correction is well formed (a thought and, where there is one, a legal
    action), so thought cloning trains on it as on a right one. ``metrics()`` counts them
    (``injected_errors`` and ``injected/<kind>``) next to the oracle's own counts.
    """

    source = "noisy_programmatic"
    oracle = False

    def __init__(self, error_rate: float = 0.2, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
        self.error_rate = float(error_rate)
        self.seed = int(seed)
        self.exact = ProgrammaticCorrector()
        self._rng = random.Random(self.seed)

    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction:
        exact = self.exact.correct(observation, thought, action, info, memory)
        legal = [str(a) for a in info.get("legal_actions", ())]
        if self._rng.random() >= self.error_rate or not legal:
            return exact
        kinds = []
        if not exact.agrees and (thought or "").strip() and action in legal:
            kinds.append("approved_wrong_thought")
        if exact.action is not None:
            kinds.append("misread")
        if exact.action is None or len(legal) > 1:
            kinds.append("wrong_action")
        kind = self._rng.choice(kinds)
        wrong = self._inject(kind, exact, thought or "", action, info, legal)
        self._counts["injected_errors"] += 1
        self._counts[f"injected/{kind}"] += 1
        return wrong

    def metrics(self) -> dict[str, int]:
        return {**self.exact.metrics(), **self._counts}

    def _inject(
        self,
        kind: str,
        exact: Correction,
        thought: str,
        action: str | None,
        info: Mapping[str, Any],
        legal: list[str],
    ) -> Correction:
        details = {**exact.details, "injected_error": kind}
        if kind == "approved_wrong_thought":
            return replace(
                exact,
                evaluation=exact.evaluation.replace("INCORRECT", "CORRECT"),
                corrected_thought=thought.strip(),
                action=action,
                agrees=True,
                thought_kept=True,
                source=self.source,
                details=details,
            )
        wrong = replace(
            exact, agrees=False, thought_kept=False, source=self.source, details=details
        )
        if kind == "misread":
            return replace(wrong, corrected_thought=self._misread(exact.corrected_thought, info))
        others = [a for a in legal if a != exact.action] or legal
        new_action = self._rng.choice(others)
        text = exact.corrected_thought
        if exact.action is not None:
            for said in (f"'{exact.action}'.", f"says {exact.action}."):
                text = text.replace(said, said.replace(exact.action, new_action))
        if text == exact.corrected_thought:  # no stated next step to change: state one
            text = text.rstrip('"') + f" So the next step is '{new_action}'.\""
        return replace(wrong, corrected_thought=text, action=new_action, solvable=True)

    def _misread(self, text: str, info: Mapping[str, Any]) -> str:
        """The oracle's thought with one reading wrong, the rest of it unchanged."""
        game = info.get("game")
        if game in FORMULA_GAMES:
            cards = [str(c)[:-1] for c in info["cards"]]
            k = self._rng.randrange(len(cards))
            seen = card_value(cards[k])
            rank = self._rng.choice([r for r in RANKS if card_value(r) != seen])
            shown = ", ".join(json.dumps(rank if i == k else c) for i, c in enumerate(cards))
            return re.sub(r'"cards": \[[^\]]*\]', lambda _: f'"cards": [{shown}]', text, count=1)
        field_name = {"numberline": "target", "blackjack": "total"}.get(str(game), "target")
        number = int(info["player_total"] if game == "blackjack" else info["target"])
        off = number + self._rng.choice([-2, -1, 1, 2])
        return re.sub(rf'"{field_name}": -?\d+', f'"{field_name}": {off}', text, count=1)


# ------------------------------------------------------------------------------------ openai
SOLVE24_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "solve24",
        "description": (
            "Exact solver: every distinct formula that uses each card value once and equals the "
            "target. Card ranks may be given as A, 2-10, J, Q, K or as numbers."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "cards": {"type": "array", "items": {"type": ["string", "integer"]}},
                "target": {"type": "integer", "description": "24 unless the task says otherwise"},
            },
            "required": ["cards"],
        },
    },
}

_TITLES = {"points24": "Points24 (the 24-point card game)", "ezpoints": "EZPoints"}

_SYSTEM = (
    "You check the reasoning of an agent that plays a card game from pictures. You see the "
    "picture the agent saw, the task, the agent's thought and the action it chose. Look at the "
    "picture yourself, decide whether the thought is right, and write the thought the agent "
    "should have had. Ace counts 1; J, Q and K count 10."
)

NOT_DETERMINED = "NOT DETERMINED"

_FORMULA_QUESTIONS = (
    "The player's thought may be wrong. Judge it by these questions:\n"
    "(1) Which cards does the picture show? If the target formula is NOT DETERMINED, call "
    "solve24 with their values to get every correct formula (keep the list to yourself).\n"
    "(2) Which card ranks does the thought name? Do they match yours, in any order?\n"
    "(3) Which formula does the thought aim for? Is it the target formula or, when that is NOT "
    "DETERMINED, one of the correct formulas, and can the current formula still become it?\n"
    "(4) Does the action append the next token of that formula (or is it '=' once the formula "
    "is complete)?\n"
    "Answer briefly, then judge. If the thought is wrong, pick the next single token to append "
    "and write the thought the player should have had.\n"
    "Reply with one JSON object and nothing else:\n"
    '{"answer1": "...", "answer2": "...", "answer3": "...", "answer4": "...", '
    '"evaluation": "YES if the thought is correct, else NO", '
    '"possible_solution": <true or false: can the current formula still reach the target; '
    "null if the thought is correct>, "
    '"target_formula": "<the target formula if one is given; the thought\'s formula if the '
    'thought is correct; else a correct formula that extends the current formula>", '
    '"correction": <null if the thought is correct, else the correct thought as a JSON '
    'object: {"cards": [...], "formula": "<the target formula>", "thoughts": "<the next '
    'token and why>"}>, '
    '"action": "<the next token to append; null if the thought is correct>"}'
)

_GENERIC_QUESTIONS = (
    "The player's thought may be wrong. Judge it by these questions:\n"
    "(1) What does the picture show?\n"
    "(2) Does the thought read the picture right?\n"
    "(3) Is the action the right move, and does it follow from the thought?\n"
    "Answer briefly, then judge. If the thought is wrong, write the thought the player should "
    "have had.\n"
    "Reply with one JSON object and nothing else:\n"
    '{"answer1": "...", "answer2": "...", "answer3": "...", '
    '"evaluation": "YES if the thought is correct, else NO", '
    '"correction": <null if the thought is correct, else the correct thought as a JSON '
    "object in the format the player uses>, "
    '"action": "<the right move; null if the thought is correct>"}'
)

_REMINDER = (
    "That reply was not a valid JSON object with an evaluation (YES or NO) and, when the "
    "thought is wrong, a correction. Send only that JSON object."
)


def _quoted(actions: Sequence[str]) -> str:
    return ", ".join(f"'{a}'" for a in actions)


def corrector_system_prompt(info: Mapping[str, Any]) -> str:
    """The corrector's system prompt for the game in ``info`` (GTR App. C's, for Points24)."""
    game = info.get("game")
    if game not in FORMULA_GAMES:
        return _SYSTEM
    legal = [str(a) for a in info.get("legal_actions", ())]
    n = len(info.get("cards", ())) or "the"
    return (
        f"You are an expert player of {_TITLES.get(str(game), str(game))}. You observe {n} "
        "playing cards in the image and the current formula. The goal is a formula that "
        f"evaluates to {info.get('target')} and uses each card's number exactly once. Each "
        f"step appends one of [{_quoted(legal)}] to the current formula, toward a correct "
        "target formula. 'J', 'Q' and 'K' count as '10', 'A' as '1'."
    )


def _values_from(cards: Sequence[Any]) -> list[int]:
    values = []
    for card in cards:
        if isinstance(card, int | float) and not isinstance(card, bool):
            values.append(int(card))
            continue
        rank = _rank_of(str(card))
        if rank is None or rank not in RANKS:
            raise ValueError(f"not a card: {card!r}")
        values.append(card_value(rank))
    return values


def solve24_tool(arguments: str | Mapping[str, Any], ops: Sequence[str] = ALL_OPERATORS) -> str:
    """Run the solver for a tool call; the JSON result never raises (errors are reported)."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        values = _values_from(args.get("cards") or [])
        if not 1 <= len(values) <= 6:
            raise ValueError("give between 1 and 6 cards")
        target = int(args.get("target", 24))
        formulas = list(solve(values, target, ops))
        return json.dumps(
            {
                "values": values,
                "target": target,
                "solvable": bool(formulas),
                "count": len(formulas),
                "formulas": formulas[:30],
            }
        )
    except Exception as exc:  # the model sent bad arguments: tell it, do not crash
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"})


def parse_correction_json(text: str | None) -> dict[str, Any] | None:
    """The JSON object in a reply (code fences and chatter around it allowed), or ``None``.

    The object needs an ``evaluation`` (text, or a boolean); its correction is ``correction``
    (GTR App. C: a JSON object, or null when the thought is correct) or ``corrected_thought``
    (text), either of which may be missing here and is checked by the caller.
    """
    if not text:
        return None
    body = re.sub(r"```(?:json)?", "", text).strip()
    candidates = [body]
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        candidates.append(body[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("evaluation"), str | bool):
            continue
        fix = data.get("correction", data.get("corrected_thought"))
        if fix is None or isinstance(fix, str | dict):
            return data
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("yes", "true"):
            return True
        if low in ("no", "false"):
            return False
    return None


def _judged_correct(data: Mapping[str, Any]) -> bool:
    explicit = _as_bool(data.get("agrees"))
    if explicit is not None:
        return explicit
    verdict = data.get("evaluation")
    if isinstance(verdict, bool):
        return verdict
    text = str(verdict or "").strip().lower().rstrip(".!")
    tail = text[-40:]
    if any(w in tail for w in ("incorrect", "not correct", "wrong")):
        return False
    if text.startswith("no") or text.endswith(" no"):
        return False
    return "correct" in tail or text.startswith("yes") or text.endswith(" yes")


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS)


_NONE_WORDS = ("", "none", "null", "n/a", NOT_DETERMINED.lower())


def _thought_from(fix: Any, legal: Sequence[str]) -> tuple[str, str | None]:
    """A correction as (thought in the agent's format, the action it names, if any)."""
    if isinstance(fix, dict):
        body = {k: v for k, v in fix.items() if str(k).lower() != "action"}
        action = fix.get("action")
        thought = json.dumps(body, ensure_ascii=False)[1:-1].strip()
        return thought, str(action) if action is not None and str(action) in legal else None
    text = str(fix)
    parsed = parse_gtr_response(text, legal)
    if parsed.valid:
        return (parsed.thought or "").strip(), parsed.action
    return text.strip(), None


def _formula_of(value: Any) -> str | None:
    if _empty(value) or not isinstance(value, str):
        return None
    return value.split("=")[0].strip() or None


class OpenAICorrector(Corrector):
    """A VLM corrector behind any OpenAI-compatible endpoint, with a ``solve24`` tool.

    Requests go through :class:`~odyssey_core.policy.openai_backend.OpenAIPolicy`'s retry
    loop (backoff, ``Retry-After``, clear 401/404 errors). ``max_tool_rounds`` bounds how many
    times the model may call the tool per correction. With an :class:`EpisodeMemory`, the
    target formula one step's answer settles on is handed to the next steps of the episode
    (App. C's "[Target Formula]"), as long as the typed formula can still become it.
    """

    source = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        temperature: float = 0.4,  # GTR Table 2: corrector temperature
        max_tokens: int = 600,  # GTR Table 2: corrector max text length
        max_tool_rounds: int = 3,
        use_tools: bool = True,
        timeout: float = 120.0,
        retry: Any = None,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from odyssey_core.policy.openai_backend import OpenAIPolicy

        super().__init__()
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_tool_rounds = max_tool_rounds
        self.use_tools = use_tools
        self._http = OpenAIPolicy(
            model,
            base_url,
            api_key,
            api_key_env=api_key_env,
            system_prompt=_SYSTEM,
            timeout=timeout,
            retry=retry,
            client=client,
            sleep=sleep,
            concurrency=1,
        )

    def __repr__(self) -> str:
        base_url = redact_uri(str(self._http.base_url))
        return f"{type(self).__name__}(model={self.model!r}, base_url={base_url!r})"

    def metrics(self) -> dict[str, int]:
        out = {
            k: 0
            for k in (
                "corrections",
                "tool_calls",
                "malformed",
                "format_retries",
                "no_correction",
                "kept",
            )
        }
        out.update(self._counts)
        out.update({f"http_{k}": v for k, v in self._http.metrics().items()})
        return out

    def messages(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
        target_formula: str | None = None,
    ) -> list[dict[str, Any]]:
        from odyssey_core.policy.openai_backend import encode_image_data_url

        lines = [f"Task: {observation.text}"]
        formula_game = info.get("game") in FORMULA_GAMES
        if formula_game:
            lines.append(f"[Current Formula] '{info.get('formula', '')}'")
        lines += [f"[Thought] {thought or '(none)'}", f"[Action] {action}"]
        if formula_game:
            lines.append(f"[Target Formula] {target_formula or NOT_DETERMINED}")
        lines.append(_FORMULA_QUESTIONS if formula_game else _GENERIC_QUESTIONS)
        image = {
            "type": "image_url",
            "image_url": {"url": encode_image_data_url(observation.image)},
        }
        return [
            {"role": "system", "content": corrector_system_prompt(info)},
            {"role": "user", "content": [image, {"type": "text", "text": "\n".join(lines)}]},
        ]

    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
        memory: EpisodeMemory | None = None,
    ) -> Correction:
        self._counts["corrections"] += 1
        formula_game = info.get("game") in FORMULA_GAMES
        target = None
        if memory is not None:
            memory.steps += 1
            if memory.target_formula and formula_game:
                if _still_reachable(memory.target_formula, str(info.get("formula", ""))):
                    target = memory.target_formula
                else:  # the agent typed past it: the corrector picks a new one
                    memory.target_formula = None
        messages = self.messages(observation, thought, action, info, target)
        ops = tuple(info.get("operators", ALL_OPERATORS))
        tools = self.use_tools and formula_game
        result = None
        for attempt in range(2):  # the first answer, then one retry with a reminder
            content = self._ask(messages, tools, ops)
            data = parse_correction_json(content)
            result = None if data is None else self._interpret(data, thought, action, info)
            if result is not None:
                break
            self._counts["malformed"] += 1
            if attempt == 0:
                self._counts["format_retries"] += 1
                messages += [
                    {"role": "assistant", "content": content or ""},
                    {"role": "user", "content": _REMINDER},
                ]
        if result is None:
            self._counts["no_correction"] += 1
            return Correction(
                evaluation="",
                corrected_thought="",
                solvable=None,
                agrees=True,  # no grounds to overrule the agent; trainers skip invalid ones
                source=self.source,
                valid=False,
                target_formula=target,
            )
        if memory is not None and formula_game:
            chosen = result.target_formula or target
            if result.solvable is False:
                chosen = None
            if chosen and evaluate_tokens(tokenize(chosen)) != info.get("target"):
                chosen = target  # not a formula for this target: keep the one we had
            memory.target_formula = chosen
            result = replace(result, target_formula=chosen)
        self._counts["agreements" if result.agrees else "disagreements"] += 1
        return self.keep_if_correct(result, thought, action)

    def _interpret(
        self,
        data: Mapping[str, Any],
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
    ) -> Correction | None:
        """A reply as a Correction; None when it says the thought is wrong but gives no
        correction (malformed: retried once)."""
        legal = [str(a) for a in info.get("legal_actions", ())]
        agrees = _judged_correct(data)
        fix = data.get("correction", data.get("corrected_thought"))
        corrected, fix_action = ("", None) if _empty(fix) else _thought_from(fix, legal)
        if not agrees and not corrected:
            return None
        named = data.get("action")
        if fix_action is None and isinstance(named, str) and named.strip() in legal:
            fix_action = named.strip()
        solvable = _as_bool(data.get("possible_solution", data.get("solvable")))
        target = _formula_of(data.get("target_formula"))
        if target is None:
            target = claimed_formula(corrected) or (
                claimed_formula(thought or "") if agrees else None
            )
        evaluation = data.get("evaluation")
        answers = [str(data[k]) for k in ("answer1", "answer2", "answer3", "answer4") if k in data]
        text = evaluation if isinstance(evaluation, str) else ("YES" if evaluation else "NO")
        return Correction(
            evaluation="; ".join([*answers, text]) if answers else text,
            corrected_thought=corrected,
            solvable=solvable,
            agrees=agrees,
            source=self.source,
            action=fix_action if not agrees else (action or fix_action),
            target_formula=target,
            details={"raw": dict(data)},
        )

    def _ask(self, messages: list[dict[str, Any]], tools: bool, ops: Sequence[str]) -> str | None:
        """One model answer, running any ``solve24`` calls it makes along the way."""
        kwargs: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        for round_ in range(self.max_tool_rounds + 1):
            allow = tools and round_ < self.max_tool_rounds
            call_kwargs = {**kwargs, "tools": [SOLVE24_TOOL]} if allow else kwargs
            # Reuse the policy backend's retry loop rather than a second copy of it.
            response = self._http._create_with_retries(messages, call_kwargs)
            message = response.choices[0].message
            calls = getattr(message, "tool_calls", None) or []
            if not calls or not allow:
                return message.content
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content or "",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                        for call in calls
                    ],
                }
            )
            for call in calls:
                self._counts["tool_calls"] += 1
                if call.function.name == "solve24":
                    result = solve24_tool(call.function.arguments, ops)
                else:
                    result = json.dumps({"error": f"unknown tool {call.function.name!r}"})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return None


# ------------------------------------------------------------------------- registry + settings
CORRECTORS: Registry[Callable[..., Corrector]] = Registry("corrector")
CORRECTORS.register("programmatic", ProgrammaticCorrector)
CORRECTORS.register("openai", OpenAICorrector)
CORRECTORS.register("noisy_programmatic", NoisyProgrammaticCorrector)
CORRECTORS.register("alfworld", "odyssey_core.recipes.gtr.alfworld_corrector:AlfWorldCorrector")

NO_CORRECTOR = "none"  # a run without a corrector (the RL4VLM baseline)


class CorrectorConfigError(ValueError):
    """A corrector's settings are incomplete or wrong; the message names the setting."""


class NoArguments(StrictModel):
    """The arguments of a corrector that takes none (the programmatic oracles)."""

    def resolve(self, where: str, environ: Mapping[str, str]) -> dict[str, Any]:
        return {}


class NoisyCorrectorSettings(StrictModel):
    """The ``noisy_programmatic`` corrector's arguments in a preset."""

    error_rate: float = Field(
        default=0.2, ge=0, le=1, description="the share of corrections given wrong, in [0, 1]"
    )
    seed: int = Field(default=0, description="seeds the draws of which corrections go wrong")

    def resolve(self, where: str, environ: Mapping[str, str]) -> dict[str, Any]:
        return {"error_rate": self.error_rate, "seed": self.seed}


class OpenAICorrectorSettings(StrictModel):
    """The ``openai`` corrector's arguments in a preset. A setting with an ``*_env`` twin is
    read from that environment variable when it is set (so a deployment can point a preset
    at its own server), else from the preset; the key only ever comes from the environment."""

    model: str | None = Field(default=None, description="the served model (the paper: gpt-4o)")
    model_env: str | None = Field(
        default=None, description="an environment variable that, when set, names the model"
    )
    base_url: str | None = Field(
        default=None,
        description="the API root: https://api.openai.com/v1, http://<host>:8000/v1 (vLLM)",
    )
    base_url_env: str | None = Field(
        default=None, description="an environment variable that, when set, gives the API root"
    )
    api_key_env: str | None = Field(
        default="OPENAI_API_KEY",
        description="the environment variable holding the API key; null: a server without keys",
    )
    temperature: float = Field(default=0.4, ge=0, description="GTR Table 2: 0.4")
    max_tokens: int = Field(default=600, ge=1, description="GTR Table 2: 600")
    max_tool_rounds: int = Field(default=3, ge=0, description="solve24 calls per correction")
    use_tools: bool = Field(default=True, description="offer solve24 in the formula games")
    timeout: float = Field(default=120.0, gt=0, description="seconds per request attempt")
    max_retries: int = Field(default=6, ge=0, description="retries of a failed request")
    max_total_wait: float = Field(default=300.0, ge=0, description="backoff budget per request")

    def _pick(self, name: str, environ: Mapping[str, str]) -> str | None:
        variable = getattr(self, f"{name}_env")
        value = environ.get(variable) if variable else None
        return value or getattr(self, name)

    def resolve(self, where: str, environ: Mapping[str, str]) -> dict[str, Any]:
        """The corrector's keyword arguments; a missing setting is a CorrectorConfigError that
        names it."""
        from odyssey_core.policy.openai_backend import RetrySettings

        def missing(name: str, what: str) -> CorrectorConfigError:
            variable = getattr(self, f"{name}_env")
            via = f" (or the environment variable {variable}, which is not set)" if variable else ""
            return CorrectorConfigError(f"the openai corrector needs {where}.{name}{via}: {what}")

        model = self._pick("model", environ)
        if not model:
            raise missing("model", "the served model's name (the paper's corrector is gpt-4o)")
        base_url = self._pick("base_url", environ)
        if not base_url:
            raise missing(
                "base_url",
                "the OpenAI-compatible API root, e.g. https://api.openai.com/v1 or "
                "http://<host>:8000/v1",
            )
        if self.api_key_env and not environ.get(self.api_key_env):
            raise CorrectorConfigError(
                f"the openai corrector reads its API key from the environment variable "
                f"{self.api_key_env} ({where}.api_key_env), which is not set: export it, or "
                f"set {where}.api_key_env: null for a server that needs no key"
            )
        return {
            "model": model,
            "base_url": base_url,
            "api_key_env": self.api_key_env,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "max_tool_rounds": self.max_tool_rounds,
            "use_tools": self.use_tools,
            "timeout": self.timeout,
            "retry": RetrySettings(
                max_retries=self.max_retries, max_total_wait=self.max_total_wait
            ),
        }


# A corrector's arguments are validated with its settings model when a preset is loaded;
# one without an entry here takes its keyword arguments unchecked.
CORRECTOR_SETTINGS: dict[str, type[StrictModel]] = {
    "programmatic": NoArguments,
    "alfworld": NoArguments,
    "openai": OpenAICorrectorSettings,
    "noisy_programmatic": NoisyCorrectorSettings,
}


def split_corrector_spec(
    data: Any, key: str = "corrector", kwargs_key: str = "corrector_kwargs"
) -> Any:
    """A settings section with ``key: {name: ..., <arguments>}`` as ``key: name`` plus
    ``kwargs_key: {<arguments>}`` (both spellings are accepted in presets)."""
    if not isinstance(data, Mapping) or not isinstance(data.get(key), Mapping):
        return data
    spec = dict(data[key])
    if "name" not in spec:
        raise ValueError(f"{key} given as a mapping needs a 'name' (e.g. openai)")
    if data.get(kwargs_key):
        raise ValueError(f"give the corrector's arguments in {key} or in {kwargs_key}, not both")
    name = spec.pop("name")
    return {**data, key: name, kwargs_key: spec}


def validate_corrector_kwargs(name: str, kwargs: Mapping[str, Any], where: str) -> None:
    """The checks a preset load can make: a known name and well-formed arguments (settings
    that come from the environment are checked by :func:`check_corrector`)."""
    if name == NO_CORRECTOR:
        if kwargs:
            raise ValueError(f"{where}: {NO_CORRECTOR!r} takes no arguments")
        return
    if name not in CORRECTORS:
        raise ValueError(
            f"{where}: unknown corrector {name!r}; known: "
            f"{', '.join([*CORRECTORS.names(), NO_CORRECTOR])}"
        )
    model = CORRECTOR_SETTINGS.get(name)
    if model is not None:
        try:
            model.model_validate(dict(kwargs))
        except ValidationError as err:
            raise ValueError(f"{where} ({name}): {err}") from None


def check_corrector(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    where: str = "rollout.corrector",
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments the corrector will be built with; raises CorrectorConfigError
    naming the first missing or wrong setting. Cheap (no client, no request): call it before
    any work."""
    environ = os.environ if environ is None else environ
    kwargs = dict(kwargs or {})
    if name == NO_CORRECTOR:
        validate_corrector_kwargs(name, kwargs, where)
        return {}
    try:
        validate_corrector_kwargs(name, kwargs, where)
    except ValueError as err:
        raise CorrectorConfigError(str(err)) from None
    model = CORRECTOR_SETTINGS.get(name)
    if model is None:
        return kwargs
    return model.model_validate(kwargs).resolve(where, environ)  # type: ignore[attr-defined]


def build_corrector(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    where: str = "rollout.corrector",
    environ: Mapping[str, str] | None = None,
    **extra: Any,
) -> Corrector | None:
    """The corrector a preset names (None for ``none``), its arguments resolved by
    :func:`check_corrector`; ``extra`` goes to its constructor as is (a test's ``client``)."""
    resolved = check_corrector(name, kwargs, where=where, environ=environ)
    if name == NO_CORRECTOR:
        return None
    return CORRECTORS.get(name)(**resolved, **extra)


def describe_corrector(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a report says about a corrector: its name, whether it is an oracle, its model
    (the one ``resolved`` by :func:`check_corrector` when given, else as configured, naming
    the variable it is read from) and one line of text."""
    kwargs = dict(kwargs or {})
    if name == NO_CORRECTOR:
        return {"name": name, "oracle": False, "model": None, "label": "no corrector"}
    oracle = bool(getattr(CORRECTORS.get(name), "oracle", False))
    model = kwargs.get("model")
    if kwargs.get("model_env"):
        model = f"${kwargs['model_env']} or {model}" if model else f"${kwargs['model_env']}"
    if resolved and resolved.get("model"):
        model = str(resolved["model"])
    if name == "noisy_programmatic":
        settings = NoisyCorrectorSettings.model_validate(kwargs)
        label = (
            f"`{name}`: not an oracle: the programmatic oracle with {settings.error_rate:.0%} "
            "of its corrections replaced by wrong ones (approved wrong thoughts, misread cards "
            "or numbers, other legal actions), seeded; a stand-in for a VLM corrector's "
            "mistakes, not a VLM"
        )
        return {
            "name": name,
            "oracle": False,
            "model": None,
            "label": label,
            "error_rate": settings.error_rate,
        }
    if oracle:
        label = (
            f"`{name}`: an oracle (it reads the game's hidden state and solves it exactly; "
            "not the paper's VLM corrector)"
        )
    else:
        label = f"`{name}`" + (f" ({model})" if model else "") + ": a model, not an oracle"
    return {"name": name, "oracle": oracle, "model": model, "label": label}


def make_corrector(name: str = "programmatic", **kwargs: Any) -> Corrector:
    """Build a registered corrector from its constructor's arguments (``programmatic`` needs
    none); presets go through :func:`build_corrector`."""
    return CORRECTORS.get(name)(**kwargs)

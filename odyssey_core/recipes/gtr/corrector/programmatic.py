"""The ``programmatic`` corrector: ground truth from the card env's privileged state and the
exact solver (an oracle), for Points24 / EZPoints, the number line and blackjack."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from odyssey_core.envs.cards.render import card_value
from odyssey_core.envs.cards.solver import (
    ALL_OPERATORS,
    completions,
    evaluate_tokens,
    tokenize,
    uses_numbers,
)
from odyssey_core.recipes.gtr.corrector.base import (
    FORMULA_GAMES,
    Correction,
    EpisodeMemory,
    JudgingCorrector,
    StepToCorrect,
    claimed_cards,
    claimed_formula,
)

__all__ = ["ProgrammaticCorrector", "basic_strategy"]


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


class ProgrammaticCorrector(JudgingCorrector):
    """Ground-truth corrections from the env's privileged state and the exact solver (an
    oracle). A thought is judged correct only when it states what the game asks (the cards and
    the formula; the numbers; the total), states it right, and the action follows from it."""

    source = "programmatic"
    oracle = True

    def judge(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        thought, action, info = step.thought, step.action, step.info
        game = info.get("game")
        if game in FORMULA_GAMES:
            result = self._formula(thought, action, info, memory)
        elif game == "numberline":
            result = self._numberline(thought, action, info)
        elif game == "blackjack":
            result = self._blackjack(thought, action, info)
        else:
            raise ValueError(f"the programmatic corrector does not know the game {game!r}")
        return result

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
        return self.checked(
            parts,
            agrees,
            corrected,
            solvable=solvable_now,
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
        side = "below" if current < target else "above"
        why = (
            f"The current number {current} is {side} the target {target}, so I press '{expected}'."
        )
        corrected = f'"target": {target}, "current": {current}, "thoughts": "{why}"'
        return self._judged_move(
            parts,
            read_ok,
            action,
            expected,
            ("moves toward the target", "wrong"),
            corrected,
            solvable=True,
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
        soft = " (an ace counted as 11)" if usable else ""
        why = (
            f"My cards {', '.join(player)} total {total}{soft} and the dealer shows {dealer}; "
            f"basic strategy says {expected}."
        )
        shown = ", ".join(json.dumps(c) for c in player)
        corrected = (
            f'"dealer": "{dealer}", "player": [{shown}], "total": {total}, "thoughts": "{why}"'
        )
        return self._judged_move(
            parts,
            read_ok,
            action,
            expected,
            ("sound", "against basic strategy"),
            corrected,
            solvable=None,
        )

    def _judged_move(
        self,
        parts: list[str],
        read_ok: bool | None,
        action: str | None,
        expected: str,
        verdicts: tuple[str, str],
        corrected: str,
        *,
        solvable: bool | None,
    ) -> Correction:
        """The correction in a game of one reading and one right move (the number line,
        blackjack): the thought is correct when it states the reading (``read_ok`` None: it
        does not), reads it right, and the action is ``expected``; ``verdicts`` words the
        action's finding (right, wrong)."""
        action_ok = action == expected
        parts.append(f"action {action!r}: " + (verdicts[0] if action_ok else verdicts[1]))
        return self.checked(
            parts,
            read_ok is True and action_ok,
            corrected,
            solvable=solvable,
            action=expected,
            details={"cards_ok": read_ok, "action_ok": action_ok},
        )

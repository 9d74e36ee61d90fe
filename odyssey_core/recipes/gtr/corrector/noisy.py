"""The ``noisy_programmatic`` corrector: the programmatic oracle with a seeded share of a VLM
corrector's mistakes injected (not an oracle)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from odyssey_core.envs.cards.render import RANKS, card_value
from odyssey_core.recipes.gtr.corrector.base import (
    FORMULA_GAMES,
    Correction,
    Corrector,
    EpisodeMemory,
    StepToCorrect,
)
from odyssey_core.recipes.gtr.corrector.programmatic import ProgrammaticCorrector

__all__ = ["NOISY_ERROR_KINDS", "NoisyProgrammaticCorrector"]

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

    def correct_step(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        exact = self.exact.correct_step(step, memory)
        thought, action, info = step.thought, step.action, step.info
        legal = [str(a) for a in info.get("legal_actions", ())]
        if self._rng.random() >= self.error_rate or not legal:
            return exact
        kinds = []
        if not exact.agrees and thought.strip() and action in legal:
            kinds.append("approved_wrong_thought")
        if exact.action is not None:
            kinds.append("misread")
        if exact.action is None or len(legal) > 1:
            kinds.append("wrong_action")
        kind = self._rng.choice(kinds)
        wrong = self._inject(kind, exact, thought, action, info, legal)
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

"""The four gym_cards tasks (Numberline, EZPoints, Points24, Blackjack), re-implemented.

Rules follow Appendix A of the GTR paper. Every env takes an action as model text (parsed with
:func:`~odyssey_core.protocol.gtr_format.parse_gtr_response`; an unusable answer plays a random
legal action and is counted), a :class:`GTRParsed`, a legal action string or an index into
``legal_actions``. ``info`` carries the privileged state a programmatic corrector needs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import gymnasium
import numpy as np

from odyssey_core.envs.base import Observation, StepResult, TurnEnv
from odyssey_core.envs.cards.render import (
    RANKS,
    SUITS,
    Card,
    card_value,
    render_panels,
    render_table,
)
from odyssey_core.envs.cards.solver import evaluate_tokens, solvable
from odyssey_core.protocol.gtr_format import GTRParsed, parse_gtr_response, resolve

__all__ = [
    "BlackjackEnv",
    "CardsEnv",
    "EZPointsEnv",
    "FormulaEnv",
    "NumberlineEnv",
    "Points24Env",
    "hand_total",
]

ANSWER_HINT = (
    'Answer with your thoughts, then the action on its own as "action": "<one legal action>".'
)


class CardsEnv(TurnEnv):
    """Shared plumbing: action resolution, step counting, observations and info."""

    game: str = ""

    def __init__(self, *, max_steps: int, image_size: tuple[int, int] = (480, 320)) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.action_space = gymnasium.spaces.Discrete(len(self.legal_actions))
        self.observation_space = gymnasium.spaces.Box(
            0, 255, (self.image_size[1], self.image_size[0], 3), np.uint8
        )
        self._steps = 0
        self._fallbacks = 0
        self._done = False

    # -- the contract -------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self._steps = 0
        self._fallbacks = 0
        self._done = False
        self._deal(options or {})
        return self._observation(), self._info(action=None, invalid=False, parse_error=None)

    def step(self, action: Any) -> StepResult:
        if self._done:
            raise RuntimeError("the episode is over; call reset()")
        played, invalid, parse_error = self._resolve(action)
        if invalid:
            self._fallbacks += 1
        reward, terminated, extra = self._apply(played)
        self._steps += 1
        truncated = False
        if not terminated and self._steps >= self.max_steps:
            outcome = self._time_limit()
            if outcome is None:  # a time limit outside the task: cut off, to be bootstrapped
                truncated = True
            else:  # the task's own horizon: the episode ends with this outcome
                reward, more = outcome
                terminated = True
                extra.update(more)
        self._done = terminated or truncated
        info = self._info(action=played, invalid=invalid, parse_error=parse_error)
        info.update(extra)
        return self._observation(), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray:  # type: ignore[override]
        return self._frame()

    # -- for subclasses -----------------------------------------------------------------------
    def _deal(self, options: dict[str, Any]) -> None:
        raise NotImplementedError

    def _apply(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        raise NotImplementedError

    def _time_limit(self) -> tuple[float, dict[str, Any]] | None:
        """What reaching ``max_steps`` means: ``None`` truncates the episode (the default); a
        game whose rules end the episode there returns ``(reward, info)`` of that last step,
        and the step is ``terminated``."""
        return None

    def _frame(self) -> np.ndarray:
        raise NotImplementedError

    def task_text(self) -> str:
        raise NotImplementedError

    def privileged_state(self) -> dict[str, Any]:
        """What the game knows and the agent must read from the frame (for correctors)."""
        raise NotImplementedError

    def state_key(self) -> tuple:
        """A hashable summary of the state, for loop detection."""
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------------
    def _observation(self) -> Observation:
        text = f"{self.task_text()}\nLegal actions: {', '.join(self.legal_actions)}.\n{ANSWER_HINT}"
        return Observation(image=self._frame(), text=text, meta={"game": self.game})

    def _info(self, *, action: str | None, invalid: bool, parse_error: str | None) -> dict:
        return {
            "game": self.game,
            "step": self._steps,
            "action": action,
            "invalid_action": invalid,
            "parse_error": parse_error,
            "fallback_count": self._fallbacks,
            "legal_actions": list(self.legal_actions),
            "state_key": self.state_key(),
            **self.privileged_state(),
        }

    def _resolve(self, action: Any) -> tuple[str, bool, str | None]:
        """Model text may fall back to a random legal action; code must name a legal one."""
        if isinstance(action, str) and action in self.legal_actions:
            return action, False, None
        if isinstance(action, str | GTRParsed):
            parsed = (
                action
                if isinstance(action, GTRParsed)
                else parse_gtr_response(action, self.legal_actions)
            )
            played, fell_back = resolve(parsed, self.legal_actions, self.np_random)
            return played, fell_back, parsed.error
        if isinstance(action, int | np.integer) and not isinstance(action, bool):
            if not 0 <= int(action) < len(self.legal_actions):
                raise ValueError(
                    f"action index {action} out of range (0..{len(self.legal_actions) - 1})"
                )
            return self.legal_actions[int(action)], False, None
        raise TypeError(
            f"unsupported action {action!r}: give model text, a GTRParsed, a legal action "
            "string or an index into env.legal_actions"
        )

    def _draw(self, n: int) -> list[Card]:
        """``n`` distinct cards from a fresh 52-card deck, using the seeded generator."""
        picks = self.np_random.choice(52, size=n, replace=False)
        return [Card(RANKS[int(p) % 13], SUITS[int(p) // 13]) for p in picks]


# ---------------------------------------------------------------------------------- Numberline
class NumberlineEnv(CardsEnv):
    """Move ``current`` to ``target`` (both in ``[0, max_value]``) with ``+`` and ``-``.

    ``layout`` is how the frame shows the two numbers: ``"lines"`` (gym_cards' look) as two
    caption lines, "Target: t" over "Current: c", in a ``font_size`` font; ``"panels"`` each
    number large in its own third of the frame (the left and the right one), so that a
    vision encoder with coarse patches sees each number in patches of its own. The rules are
    the same in both.
    """

    LAYOUTS = ("lines", "panels")

    game = "numberline"

    def __init__(
        self,
        *,
        max_value: int = 5,
        max_steps: int = 10,
        image_size: tuple[int, int] = (480, 320),
        font_size: int = 20,
        layout: str = "lines",
    ) -> None:
        if max_value < 1:
            raise ValueError("max_value must be >= 1")
        if font_size < 1:
            raise ValueError(f"font_size must be >= 1, got {font_size}")
        if layout not in self.LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(self.LAYOUTS)}; got {layout!r}")
        self.max_value = max_value
        self.font_size = int(font_size)
        self.layout = layout
        self.legal_actions = ["+", "-"]
        self.target = 0
        self.current = 0
        super().__init__(max_steps=max_steps, image_size=image_size)

    def _deal(self, options: dict[str, Any]) -> None:
        self.target = int(options.get("target", self.np_random.integers(self.max_value + 1)))
        current = options.get("current")
        if current is None:
            # Never start on the target: there would be nothing to do.
            choices = [v for v in range(self.max_value + 1) if v != self.target]
            current = choices[int(self.np_random.integers(len(choices)))]
        self.current = int(current)

    def _apply(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        before = abs(self.current - self.target)
        self.current = int(np.clip(self.current + (1 if action == "+" else -1), 0, self.max_value))
        after = abs(self.current - self.target)
        if after == 0:
            return 1.0, True, {"success": True}
        return (-1.0 if after >= before else 0.0), False, {"success": False}

    def _frame(self) -> np.ndarray:
        if self.layout == "panels":
            return render_panels(
                [("Target", str(self.target)), ("Current", str(self.current))], self.image_size
            )
        return render_table(
            [],
            [f"Target: {self.target}", f"Current: {self.current}"],
            self.image_size,
            caption_size=self.font_size,
        )

    def task_text(self) -> str:
        return (
            "Numberline: the image shows a target number and the current number. '+' adds one "
            "to the current number and '-' subtracts one. Make the current number equal the "
            "target."
        )

    def privileged_state(self) -> dict[str, Any]:
        return {"target": self.target, "current": self.current, "solvable": True}

    def state_key(self) -> tuple:
        return (self.target, self.current)


# ------------------------------------------------------------------------------- formula games
class FormulaEnv(CardsEnv):
    """Build a formula from the card values, one token per step, and finish with ``=``.

    A number that is not on a card, or whose cards are all used, is illegal: -1 and the state
    does not change. ``=`` ends the episode: ``success_reward`` when the formula uses every
    card and equals the target, ``fail_reward`` otherwise.
    """

    n_cards = 4
    operators: tuple[str, ...] = ("+", "-", "*", "/")
    parentheses = True
    # True: ``max_steps`` is the task's horizon T and its last step is judged like '='
    # (Points24, GTR App. A.1); False: the episode is only cut off there (truncated).
    horizon_terminates = False

    def __init__(
        self,
        *,
        target: int,
        max_steps: int,
        only_solvable: bool,
        success_reward: float = 10.0,
        fail_reward: float = -1.0,
        illegal_reward: float = -1.0,
        image_size: tuple[int, int] = (480, 320),
    ) -> None:
        self.target = int(target)
        self.only_solvable = only_solvable
        self.success_reward = success_reward
        self.fail_reward = fail_reward
        self.illegal_reward = illegal_reward
        parens = ["(", ")"] if self.parentheses else []
        self.legal_actions = [str(n) for n in range(1, 11)] + list(self.operators) + parens + ["="]
        self.cards: list[Card] = []
        self.tokens: list[str] = []
        self._solvable = False
        super().__init__(max_steps=max_steps, image_size=image_size)

    @property
    def values(self) -> list[int]:
        return [card_value(c.rank) for c in self.cards]

    @property
    def remaining(self) -> list[int]:
        left = Counter(self.values)
        left.subtract(int(t) for t in self.tokens if t.isdigit())
        return sorted(left.elements())

    @property
    def formula(self) -> str:
        return "".join(self.tokens)

    def _deal(self, options: dict[str, Any]) -> None:
        given = options.get("cards")
        if given is not None:
            self.cards = [
                c if isinstance(c, Card) else Card(str(c)[:-1], str(c)[-1]) for c in given
            ]
            if len(self.cards) != self.n_cards:
                raise ValueError(f"{self.game} needs {self.n_cards} cards, got {len(self.cards)}")
        else:
            for _ in range(1000):  # solvable deals are common; this never runs out in practice
                self.cards = self._draw(self.n_cards)
                if not self.only_solvable or self._check_solvable():
                    break
        self.tokens = []
        self._solvable = self._check_solvable()

    def _check_solvable(self) -> bool:
        return solvable(self.values, self.target, self.operators)

    def _apply(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if action == "=":
            reward, info = self._outcome()
            return reward, True, {**info, "illegal": False}
        if action.isdigit() and int(action) not in self.remaining:
            return self.illegal_reward, False, {"success": False, "illegal": True}
        self.tokens.append(action)
        return 0.0, False, {"success": False, "illegal": False}

    def _outcome(self) -> tuple[float, dict[str, Any]]:
        """The terminal reward of the formula as it stands: ``success_reward`` when it uses
        every card and equals the target, else ``fail_reward``."""
        value = evaluate_tokens(self.tokens)
        success = value is not None and value == self.target and not self.remaining
        reward = self.success_reward if success else self.fail_reward
        return reward, {"success": success, "value": _show(value)}

    def _time_limit(self) -> tuple[float, dict[str, Any]] | None:
        if not self.horizon_terminates:
            return None
        # GTR App. A.1: the episode terminates when the step count reaches T; "at termination,
        # if the formula evaluates to 24, the agent receives 10; otherwise -1". That outcome is
        # the step's reward (it replaces the step's own 0 or -1, as the reward of '=' does).
        reward, info = self._outcome()
        return reward, {**info, "time_limit": True}

    def _frame(self) -> np.ndarray:
        return render_table([("", self.cards)], [f"Formula: {self.formula}"], self.image_size)

    def privileged_state(self) -> dict[str, Any]:
        return {
            "cards": [str(c) for c in self.cards],
            "card_values": self.values,
            "formula": self.formula,
            "formula_tokens": list(self.tokens),
            "remaining": self.remaining,
            "target": self.target,
            "operators": list(self.operators),
            "parentheses": self.parentheses,
            "solvable": self._solvable,
        }

    def state_key(self) -> tuple:
        return (tuple(str(c) for c in self.cards), tuple(self.tokens))


def _show(value: Any) -> str | None:
    return None if value is None else str(value)


class EZPointsEnv(FormulaEnv):
    """Two cards that always reach the target (12) with one operator: ``a op b =``. ``ranks``
    narrows the deck to those ranks (all four suits of each): the same task over fewer cards."""

    game = "ezpoints"
    n_cards = 2
    parentheses = False

    def __init__(
        self,
        *,
        target: int = 12,
        operators: tuple[str, ...] | list[str] = ("+", "-"),
        max_steps: int = 10,
        image_size: tuple[int, int] = (480, 320),
        ranks: tuple[str, ...] | list[str] | None = None,
    ) -> None:
        # The paper's Appendix A lists {+, -, =}; pass ("+", "*") for the original gym_cards set.
        self.operators = tuple(operators)
        unknown = sorted(set(ranks or ()) - set(RANKS))
        if unknown or (ranks is not None and len(set(ranks)) < 1):
            raise ValueError(f"ranks must be some of {', '.join(RANKS)}; got {unknown or ranks}")
        self.ranks = tuple(dict.fromkeys(ranks)) if ranks is not None else None
        super().__init__(
            target=target, max_steps=max_steps, only_solvable=True, image_size=image_size
        )

    def _draw(self, n: int) -> list[Card]:
        if self.ranks is None:
            return super()._draw(n)
        deck = [Card(rank, suit) for suit in SUITS for rank in self.ranks]
        picks = self.np_random.choice(len(deck), size=n, replace=False)
        return [deck[int(p)] for p in picks]

    def task_text(self) -> str:
        return (
            f"EZPoints: the image shows two playing cards and the formula so far. Build a "
            f"formula that uses both card numbers once and equals {self.target}, one number or "
            f"operator ({' '.join(self.operators)}) per step, then choose '='. J, Q and K count "
            "as 10 and A as 1."
        )


class Points24Env(FormulaEnv):
    """Four cards, the four operators and parentheses; the deal may have no solution.

    GTR App. A.1: -1 for an illegal action, 0 for a legal one; the episode terminates on '='
    or at step T = ``max_steps`` (20), and its last step earns 10 when the formula then uses
    every card and equals 24, else -1 (``terminated``, not truncated: T is part of the task).
    """

    game = "points24"
    horizon_terminates = True

    def __init__(
        self,
        *,
        target: int = 24,
        max_steps: int = 20,
        only_solvable: bool = False,
        image_size: tuple[int, int] = (480, 320),
    ) -> None:
        super().__init__(
            target=target, max_steps=max_steps, only_solvable=only_solvable, image_size=image_size
        )

    def task_text(self) -> str:
        return (
            f"Points24: the image shows four playing cards and the formula so far. Build a "
            f"formula that uses each card's number exactly once and equals {self.target}, "
            "adding one number, operator or parenthesis per step, then choose '='. J, Q and K "
            "count as 10 and A as 1. A number that is not on a card or is already used is "
            "illegal."
        )


# ---------------------------------------------------------------------------------- Blackjack
def hand_total(cards: list[Card]) -> tuple[int, bool]:
    """Best total and whether an ace is counted as 11 ("usable ace")."""
    total = sum(card_value(c.rank) for c in cards)
    if any(c.rank == "A" for c in cards) and total + 10 <= 21:
        return total + 10, True
    return total, False


class BlackjackEnv(CardsEnv):
    """Hit or stand against a dealer showing one card; the dealer draws to 17.

    Win +1, lose -1, push 0; going over 21 loses at once. One shuffled 52-card deck per
    episode. The dealer stands on every 17 (soft ones too); a natural pays like any win.
    """

    game = "blackjack"

    def __init__(self, *, max_steps: int = 20, image_size: tuple[int, int] = (480, 320)) -> None:
        self.legal_actions = ["stand", "hit"]
        self.player: list[Card] = []
        self.dealer: list[Card] = []
        self._deck: list[Card] = []
        self._revealed = False
        self._outcome: str | None = None
        super().__init__(max_steps=max_steps, image_size=image_size)

    def _deal(self, options: dict[str, Any]) -> None:
        self._deck = self._draw(52)
        self.player = [self._deck.pop(), self._deck.pop()]
        self.dealer = [self._deck.pop(), self._deck.pop()]
        self._revealed = False
        self._outcome = None

    def _apply(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if action == "hit":
            self.player.append(self._deck.pop())
            if hand_total(self.player)[0] > 21:
                self._revealed, self._outcome = True, "bust"
                return -1.0, True, {"success": False}
            return 0.0, False, {"success": False}
        self._revealed = True
        while hand_total(self.dealer)[0] < 17:
            self.dealer.append(self._deck.pop())
        mine, theirs = hand_total(self.player)[0], hand_total(self.dealer)[0]
        if theirs > 21 or mine > theirs:
            self._outcome, reward = "win", 1.0
        elif mine < theirs:
            self._outcome, reward = "lose", -1.0
        else:
            self._outcome, reward = "push", 0.0
        return reward, True, {"success": reward > 0}

    def _frame(self) -> np.ndarray:
        dealer: list[Card | None] = list(self.dealer) if self._revealed else [self.dealer[0], None]
        total = hand_total(self.player)[0]
        caption = f"Your total: {total}" + (f"  ({self._outcome})" if self._outcome else "")
        return render_table([("Dealer", dealer), ("You", self.player)], [caption], self.image_size)

    def task_text(self) -> str:
        return (
            "Blackjack: the image shows the dealer's cards (one face down) and yours. 'hit' "
            "takes another card, 'stand' ends your turn and the dealer draws up to 17. Get "
            "closer to 21 than the dealer without going over. J, Q and K count 10; an ace "
            "counts 1 or 11."
        )

    def privileged_state(self) -> dict[str, Any]:
        total, usable = hand_total(self.player)
        return {
            "player_cards": [str(c) for c in self.player],
            "dealer_cards": [str(c) for c in self.dealer],
            "dealer_visible": str(self.dealer[0]) if self.dealer else None,
            "player_total": total,
            "usable_ace": usable,
            "outcome": self._outcome,
            "solvable": None,
        }

    def state_key(self) -> tuple:
        return (tuple(str(c) for c in self.player), tuple(str(c) for c in self.dealer[:1]))

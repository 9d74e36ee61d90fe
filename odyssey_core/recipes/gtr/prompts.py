"""System prompts for the card games GTR trains on, written for this project.

Every prompt asks for the same answer shape the env's parser reads
(:mod:`odyssey_core.protocol.gtr_format`): a short thought first, then ``"action": "<a>"``.
The thought fields match what the programmatic corrector writes, so cloned corrections and the
agent's own answers share one format.

A prompt is written from the env it is for (:func:`cards_system_prompt` builds the env with
the run's ``env_kwargs``): the moves it offers are exactly the env's legal actions, and the
formula games' target is the env's, so a configured operator set (EZPoints' ``operators``) or
target can never disagree with what the prompt tells the agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from odyssey_core.envs.cards import games
from odyssey_core.recipes.gtr.corrector.alfworld import ALFWORLD_SYSTEM_PROMPT

__all__ = [
    "CARDS_SYSTEM_PROMPTS",
    "cards_env",
    "cards_system_prompt",
    "gtr_system_prompt",
    "quoted",
]

_ANSWER = (
    'Reply in one line: first your reasoning, then the move as "action": "<one legal action>". '
    "Write the action last and nothing after it."
)
_FORMULA_REASONING = (
    'Reason as: "cards": [...], "formula": "<the formula you aim for>", "thoughts": "<the next '
    'token and why>". '
)

_GAMES: dict[str, type[games.CardsEnv]] = {
    "numberline": games.NumberlineEnv,
    "ezpoints": games.EZPointsEnv,
    "points24": games.Points24Env,
    "blackjack": games.BlackjackEnv,
}


def quoted(actions: Sequence[str], last: str = "or") -> str:
    """``'+', '-' or '='``: actions in single quotes, as the prompts name them."""
    items = [f"'{a}'" for a in actions]
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {last} {items[-1]}"


def _key(game: str) -> str:
    key = game.strip().lower().removeprefix("cards-")
    if key not in _GAMES:
        known = ", ".join(sorted(_GAMES))
        raise ValueError(f"no cards system prompt for {game!r}; known: {known}")
    return key


def cards_env(game: str, env_kwargs: Mapping[str, Any] | None = None) -> games.CardsEnv:
    """The env a prompt describes (built, never reset: nothing is drawn or rendered)."""
    return _GAMES[_key(game)](**dict(env_kwargs or {}))


def _formula_prompt(env: games.FormulaEnv, title: str, cards: str) -> str:
    numbers = [a for a in env.legal_actions if a.isdigit()]
    operators = [a for a in env.legal_actions if a in env.operators]
    parens = [a for a in env.legal_actions if a in ("(", ")")]
    ops = f"an operator ({quoted(operators)})" if len(operators) > 1 else quoted(operators)
    pieces = [f"a card value ('{numbers[0]}' to '{numbers[-1]}')", ops]
    if parens:
        pieces.append(f"a parenthesis ({quoted(parens)})")
    moves = ", ".join(pieces) + ", or '=' to submit"
    return (
        f"You play {title} from a picture of {cards}. Build a formula that uses each card's "
        f"value exactly once and equals {env.target}, one token per move: {moves}. Ace counts "
        "1; J, Q and K count 10. " + _FORMULA_REASONING + _ANSWER
    )


def _prompt(env: games.CardsEnv) -> str:
    if isinstance(env, games.EZPointsEnv):
        return _formula_prompt(env, "EZPoints", "two playing cards")
    if isinstance(env, games.Points24Env):
        return _formula_prompt(env, "Points24", "four playing cards")
    if isinstance(env, games.NumberlineEnv):
        plus, minus = env.legal_actions
        return (
            "You play Numberline from a picture. The picture shows a target number and the "
            f"current number. Each move is '{plus}' (add one to the current number) or "
            f"'{minus}' (subtract one). Reach the target in as few moves as you can. Reason "
            'as: "target": <n>, "current": <n>, "thoughts": "<which way to move and why>". '
            + _ANSWER
        )
    if isinstance(env, games.BlackjackEnv):
        return (
            "You play Blackjack from a picture of the dealer's visible card and your own cards. "
            "Each move is 'hit' (take a card) or 'stand' (stop). Get closer to 21 than the "
            'dealer without going over. Reason as: "dealer": "<rank>", "player": [...], '
            '"total": <n>, "thoughts": "<hit or stand and why>". ' + _ANSWER
        )
    raise ValueError(f"no cards system prompt for {type(env).__name__}")


def cards_system_prompt(game: str, env_kwargs: Mapping[str, Any] | None = None) -> str:
    """The prompt for a game name (``points24``) or a registry name (``cards-points24``),
    written from the env built with ``env_kwargs`` (its legal actions and target)."""
    return _prompt(cards_env(game, env_kwargs))


def gtr_system_prompt(env_name: str, env_kwargs: Mapping[str, Any] | None = None) -> str:
    """The agent's system prompt: ALFWorld's for an ``alfworld*`` env, else the card game's
    (for the env as ``env_kwargs`` configures it)."""
    if env_name.startswith("alfworld"):
        return ALFWORLD_SYSTEM_PROMPT
    return cards_system_prompt(env_name, env_kwargs)


# The prompts of the envs with their default settings.
CARDS_SYSTEM_PROMPTS: dict[str, str] = {game: cards_system_prompt(game) for game in _GAMES}

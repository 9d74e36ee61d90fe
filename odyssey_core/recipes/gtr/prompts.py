"""System prompts for the card games GTR trains on, written for this project.

Every prompt asks for the same answer shape the env's parser reads
(:mod:`odyssey_core.protocol.gtr_format`): a short thought first, then ``"action": "<a>"``.
The thought fields match what the programmatic corrector writes, so cloned corrections and the
agent's own answers share one format.
"""

from __future__ import annotations

from odyssey_core.recipes.gtr.alfworld_corrector import ALFWORLD_SYSTEM_PROMPT

__all__ = ["CARDS_SYSTEM_PROMPTS", "cards_system_prompt", "gtr_system_prompt"]

_ANSWER = (
    'Reply in one line: first your reasoning, then the move as "action": "<one legal action>". '
    "Write the action last and nothing after it."
)

CARDS_SYSTEM_PROMPTS: dict[str, str] = {
    "numberline": (
        "You play Numberline from a picture. The picture shows a target number and the current "
        "number. Each move is '+' (add one to the current number) or '-' (subtract one). Reach "
        'the target in as few moves as you can. Reason as: "target": <n>, "current": <n>, '
        '"thoughts": "<which way to move and why>". ' + _ANSWER
    ),
    "ezpoints": (
        "You play EZPoints from a picture of two playing cards. Build a formula that uses each "
        "card's value exactly once and equals 12, one token per move: a card value, '+', '*' or "
        "'=' to submit. Ace counts 1; J, Q and K count 10. Reason as: \"cards\": [...], "
        '"formula": "<the formula you aim for>", "thoughts": "<the next token and why>". ' + _ANSWER
    ),
    "points24": (
        "You play Points24 from a picture of four playing cards. Build a formula that uses each "
        "card's value exactly once and equals 24, one token per move: a card value, an "
        "operator, a parenthesis, or '=' to submit. Ace counts 1; J, Q and K count 10. Reason "
        'as: "cards": [...], "formula": "<the formula you aim for>", "thoughts": "<the next '
        'token and why>". ' + _ANSWER
    ),
    "blackjack": (
        "You play Blackjack from a picture of the dealer's visible card and your own cards. "
        "Each move is 'hit' (take a card) or 'stand' (stop). Get closer to 21 than the dealer "
        'without going over. Reason as: "dealer": "<rank>", "player": [...], "total": <n>, '
        '"thoughts": "<hit or stand and why>". ' + _ANSWER
    ),
}


def cards_system_prompt(game: str) -> str:
    """The prompt for a game name (``points24``) or a registry name (``cards-points24``)."""
    key = game.strip().lower().removeprefix("cards-")
    if key not in CARDS_SYSTEM_PROMPTS:
        known = ", ".join(sorted(CARDS_SYSTEM_PROMPTS))
        raise ValueError(f"no cards system prompt for {game!r}; known: {known}")
    return CARDS_SYSTEM_PROMPTS[key]


def gtr_system_prompt(env_name: str) -> str:
    """The agent's system prompt: ALFWorld's for an ``alfworld*`` env, else the card game's."""
    if env_name.startswith("alfworld"):
        return ALFWORLD_SYSTEM_PROMPT
    return cards_system_prompt(env_name)

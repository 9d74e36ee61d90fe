"""Card-game environments from gym_cards (as used by RL4VLM and GTR), re-implemented.

``register_cards_envs()`` adds ``cards-numberline``, ``cards-ezpoints``, ``cards-points24`` and
``cards-blackjack`` to the environment registry (and to Gymnasium as ``odyssey/<name>``); it is
safe to call more than once.
"""

from __future__ import annotations

from odyssey_core.envs.cards.games import (
    BlackjackEnv,
    CardsEnv,
    EZPointsEnv,
    FormulaEnv,
    NumberlineEnv,
    Points24Env,
)

__all__ = [
    "CARDS_ENVS",
    "BlackjackEnv",
    "CardsEnv",
    "EZPointsEnv",
    "FormulaEnv",
    "NumberlineEnv",
    "Points24Env",
    "register_cards_envs",
]

# registry name -> (entry point, description)
CARDS_ENVS: dict[str, tuple[str, str]] = {
    "cards-numberline": (
        "odyssey_core.envs.cards.games:NumberlineEnv",
        "gym_cards Numberline: move the current number to the target with + and -",
    ),
    "cards-ezpoints": (
        "odyssey_core.envs.cards.games:EZPointsEnv",
        "gym_cards EZPoints: two cards, reach 12",
    ),
    "cards-points24": (
        "odyssey_core.envs.cards.games:Points24Env",
        "gym_cards Points24: four cards, reach 24 (not always solvable)",
    ),
    "cards-blackjack": (
        "odyssey_core.envs.cards.games:BlackjackEnv",
        "gym_cards Blackjack: hit or stand against a dealer",
    ),
}


def register_cards_envs() -> list[str]:
    """Register the card envs that are not registered yet; returns the names it added."""
    from odyssey_core.envs.registry import ENVIRONMENTS, EnvSpec, register_env

    added = []
    for name, (entry_point, description) in CARDS_ENVS.items():
        if name in ENVIRONMENTS:  # idempotent: the lead's registry and tests may both call it
            continue
        register_env(EnvSpec(name=name, entry_point=entry_point, description=description))
        added.append(name)
    return added

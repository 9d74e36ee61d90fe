"""The card-game environments as data: ``cards-numberline``, ``-ezpoints``, ``-points24`` and
``-blackjack``, made from the classes in ``games``."""

from __future__ import annotations

from odyssey_core.envs.spec import EnvSpec

__all__ = ["CARDS_ENVS"]

CARDS_ENVS: tuple[EnvSpec, ...] = (
    EnvSpec(
        name="cards-numberline",
        entry_point="odyssey_core.envs.cards.games:NumberlineEnv",
        description="gym_cards Numberline: move the current number to the target with + and -",
    ),
    EnvSpec(
        name="cards-ezpoints",
        entry_point="odyssey_core.envs.cards.games:EZPointsEnv",
        description="gym_cards EZPoints: two cards, reach 12",
    ),
    EnvSpec(
        name="cards-points24",
        entry_point="odyssey_core.envs.cards.games:Points24Env",
        description="gym_cards Points24: four cards, reach 24 (not always solvable)",
    ),
    EnvSpec(
        name="cards-blackjack",
        entry_point="odyssey_core.envs.cards.games:BlackjackEnv",
        description="gym_cards Blackjack: hit or stand against a dealer",
    ),
)

"""Card-game environments from gym_cards (as used by RL4VLM and GTR), re-implemented.

``CARDS_ENVS`` (in ``specs``) lists ``cards-numberline``, ``cards-ezpoints``, ``cards-points24``
and ``cards-blackjack`` as data; ``odyssey_core.envs.registry`` registers them (and with
Gymnasium as ``odyssey/<name>``).
"""

from __future__ import annotations

from odyssey_core.envs.cards.specs import CARDS_ENVS

__all__ = ["CARDS_ENVS"]  # the env classes live in odyssey_core.envs.cards.games

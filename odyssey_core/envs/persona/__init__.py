"""A generated SmartSpot-like world for personalized GUI agents (the ESPO task).

A user with a hidden profile makes a possibly vague request; the agent works a phone app
(search steps), declares the item pool with a summary of the user's intent (one pool step),
then says Yes / No to each candidate (recommend steps).

Modules: ``screen`` (the element tree), ``episode`` (the records), ``catalog`` (channels and
items), ``users`` (scripted users and the label oracle), ``app`` (the app's state machine),
``render`` (Pillow renderer), ``demonstrator`` (optimal actions and demonstrations),
``dataset`` (generation, folders, the SmartSpot loader), ``env``
(:class:`~odyssey_core.envs.persona.env.PersonaEnv`) and ``specs`` (``PERSONA_ENVS``). The
actions and their answer format are the protocol's (:mod:`odyssey_core.protocol.gui`); the
expert agent is :class:`~odyssey_core.agents.persona_expert.PersonaExpert`. This package
re-exports only the light, import-free-of-numpy parts, so that the env registry can read
``PERSONA_ENVS`` cheaply; import the rest from its module.
"""

from __future__ import annotations

from odyssey_core.envs.persona.app import AppState, PersonaApp
from odyssey_core.envs.persona.catalog import CHANNELS, Item
from odyssey_core.envs.persona.episode import EpisodeRecord, StepRecord
from odyssey_core.envs.persona.screen import Element, Screen
from odyssey_core.envs.persona.specs import PERSONA_ENVS
from odyssey_core.envs.persona.users import User

__all__ = [
    "CHANNELS",
    "PERSONA_ENVS",
    "AppState",
    "Element",
    "EpisodeRecord",
    "Item",
    "PersonaApp",
    "Screen",
    "StepRecord",
    "User",
]

"""The personalized-GUI environments as data: ``persona`` (every channel) and
``persona-<channel>`` for each channel, all made by
:class:`~odyssey_core.envs.persona.env.PersonaEnv` in replay mode on the generated ``tiny``
preset unless told otherwise (``dataset=``, ``preset=``, ``mode="online"`` ...)."""

from __future__ import annotations

from odyssey_core.envs.spec import EnvSpec

__all__ = ["PERSONA_CHANNELS", "PERSONA_ENVS"]

ENTRY_POINT = "odyssey_core.envs.persona.env:PersonaEnv"
# the channels of odyssey_core.envs.persona.catalog.CHANNELS, written out so that reading
# this table imports nothing
PERSONA_CHANNELS: tuple[str, ...] = (
    "food",
    "hotel",
    "flight",
    "movie",
    "medicine",
    "travel",
    "travel_dining",
)

PERSONA_ENVS: tuple[EnvSpec, ...] = (
    EnvSpec(
        name="persona",
        entry_point=ENTRY_POINT,
        description="personalized GUI agent, SmartSpot-like episodes of every channel",
    ),
    *(
        EnvSpec(
            name=f"persona-{channel}",
            entry_point=ENTRY_POINT,
            kwargs={"channel": channel},
            description=f"personalized GUI agent, SmartSpot-like {channel} episodes",
        )
        for channel in PERSONA_CHANNELS
    ),
)

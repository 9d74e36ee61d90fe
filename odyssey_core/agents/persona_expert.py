"""The personalized-GUI expert: plays :class:`~odyssey_core.envs.persona.env.PersonaEnv`
perfectly, for ``odyssey play`` and as the upper bound of its evaluations."""

from __future__ import annotations

from typing import Any

from odyssey_core.agents.base import Agent
from odyssey_core.envs.base import Observation, TurnEnv
from odyssey_core.envs.persona.demonstrator import optimal_moves, realise
from odyssey_core.protocol.gui import NO_POINT, GuiAction

__all__ = ["PersonaExpert"]


class PersonaExpert(Agent):
    """Reads the env's privileged state: in replay mode the demonstrated action of the step on
    screen, online the demonstrator's first optimal move (clicks at the target's centre) and
    the label oracle's answer for each candidate."""

    name = "persona-expert"

    def act(self, env: TurnEnv, observation: Observation, info: dict[str, Any]) -> GuiAction:
        persona: Any = env.unwrapped
        if persona.mode == "replay":
            return persona.episode.steps[persona.step_index].gold
        app, state = persona.app, persona.state
        if persona.candidate is not None:
            label = app.user.label(app.item(persona.candidate), app.items(app.user.pool_app))
            return GuiAction("recommendation", NO_POINT, label)
        return realise(optimal_moves(app, state)[0], app.screen(state))

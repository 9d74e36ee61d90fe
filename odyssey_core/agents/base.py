"""The agent interface used by `odyssey play`, walkthrough recording and evaluation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from odyssey_core.common.registry import Registry
from odyssey_core.envs.base import Observation, TurnEnv


class Agent(ABC):
    """Chooses the next action for one environment; may inspect the env (the expert does)."""

    name: str = "agent"

    def reset(self, env: TurnEnv, seed: int | None = None) -> None:  # noqa: B027 (optional hook)
        """Called after ``env.reset``; agents that plan or sample start over here."""

    @abstractmethod
    def act(self, env: TurnEnv, observation: Observation, info: dict[str, Any]) -> Any:
        """An action ``env.step`` accepts: model text, button names or an action index."""


AGENTS: Registry[type[Agent]] = Registry("agent")
AGENTS.register("expert", "odyssey_core.agents.expert:SearchExpert")
AGENTS.register("random", "odyssey_core.agents.random_agent:RandomAgent")
AGENTS.register("persona-expert", "odyssey_core.agents.persona_expert:PersonaExpert")


def make_agent(name: str, **kwargs: Any) -> Agent:
    return AGENTS.get(name)(**kwargs)

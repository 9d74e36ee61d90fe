"""Non-learning agents: the search expert (walkthroughs, upper bound) and a random agent."""

from odyssey_core.agents.base import AGENTS, Agent, make_agent
from odyssey_core.agents.expert import SearchExpert
from odyssey_core.agents.random_agent import RandomAgent

__all__ = ["AGENTS", "Agent", "RandomAgent", "SearchExpert", "make_agent"]

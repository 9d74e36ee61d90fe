import gymnasium
import pytest

import odyssey_core.envs  # noqa: F401  (registers the gymnasium ids)
from odyssey_core.agents import AGENTS, RandomAgent, SearchExpert, make_agent
from odyssey_core.common.registry import Registry, RegistryError
from odyssey_core.envs import ENVIRONMENTS, list_envs
from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS


def test_registry_lists_known_names_on_a_miss() -> None:
    registry: Registry[int] = Registry("widget")
    registry.register("one", 1)
    with pytest.raises(RegistryError, match="unknown widget 'two'; known: one"):
        registry.get("two")
    with pytest.raises(RegistryError, match="already registered"):
        registry.register("one", 2)


def test_lazy_entries_import_on_first_use() -> None:
    registry: Registry[type] = Registry("thing")
    registry.register("ordered", "collections:OrderedDict")
    from collections import OrderedDict

    assert registry.get("ordered") is OrderedDict


def test_every_level_is_registered_here_and_in_gymnasium() -> None:
    names = {spec.name for spec in list_envs()}
    assert {f"odland-{lv}" for lv in ODLAND_LEVELS} <= names
    assert {f"mario-{lv}" for lv in MARIO_LEVELS} <= names
    assert "mario-2-3" not in names and "mario-4-3" not in names
    assert len(ODLAND_LEVELS) >= 6 and len(MARIO_LEVELS) == 10
    for name in ENVIRONMENTS:
        assert f"odyssey/{name}" in gymnasium.registry


def test_agents_registry() -> None:
    assert set(AGENTS.names()) == {"expert", "persona-expert", "random"}
    assert isinstance(make_agent("expert"), SearchExpert)
    assert isinstance(make_agent("random", seed=1), RandomAgent)

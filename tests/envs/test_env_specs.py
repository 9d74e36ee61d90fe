"""The env registry reads the env packages' spec tables; specs are plain data."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import gymnasium

from odyssey_core.envs import ENVIRONMENTS, EnvSpec, list_envs, make_env, register_env
from odyssey_core.envs.alfworld.specs import ALFWORLD_ENVS
from odyssey_core.envs.cards.specs import CARDS_ENVS
from odyssey_core.envs.persona.specs import PERSONA_ENVS
from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS
from odyssey_core.envs.pyboy.specs import PYBOY_ENVS
from odyssey_core.envs.registry import BUILTIN_ENVS, GYM_NAMESPACE


def test_every_builtin_spec_is_registered_here_and_with_gymnasium() -> None:
    assert (*PYBOY_ENVS, *CARDS_ENVS, *ALFWORLD_ENVS, *PERSONA_ENVS) == BUILTIN_ENVS
    names = [spec.name for spec in BUILTIN_ENVS]
    # odland, mario, 4 cards, 7 alfworld, persona + its 7 channels
    assert len(names) == len(set(names)) == len(ODLAND_LEVELS) + len(MARIO_LEVELS) + 4 + 7 + 8
    assert {"odland-1-1", "mario-4-2", "cards-points24", "alfworld", "persona-hotel"} <= set(names)
    assert set(names) <= set(ENVIRONMENTS.names())
    listed = {spec.name: spec for spec in list_envs()}
    for spec in BUILTIN_ENVS:
        assert ENVIRONMENTS.get(spec.name) is spec and listed[spec.name] is spec
        gym_spec = gymnasium.spec(f"{GYM_NAMESPACE}/{spec.name}")
        assert gym_spec.kwargs == {"env_name": spec.name}


def test_entry_points_name_modules_that_exist() -> None:
    for spec in BUILTIN_ENVS:
        module, _, attribute = spec.entry_point.partition(":")
        assert attribute and importlib.util.find_spec(module) is not None, spec


def test_pyboy_specs_carry_game_and_level() -> None:
    odland = {s.name: s for s in PYBOY_ENVS}["odland-2-3"]
    assert odland.kwargs == {"game": "odland", "level": "2-3"}
    assert {s.name: s for s in ALFWORLD_ENVS}["alfworld-heat"].kwargs["task_types"] == [
        "pick_heat_then_place_in_recep"
    ]


def test_register_env_and_make_env_with_overrides() -> None:
    name = "test-env-specs-fake"
    if name not in ENVIRONMENTS:
        spec = EnvSpec(name, "helpers_envs:FakeTurnEnv", {"episode_len": 3, "shape": (4, 6)})
        assert register_env(spec) is spec
    env = make_env(name, shape=(8, 10))
    assert env.episode_len == 3 and env.shape == (8, 10, 3)
    assert gymnasium.spec(f"{GYM_NAMESPACE}/{name}").kwargs == {"env_name": name}


def test_importing_the_registry_loads_no_emulator_or_engine() -> None:
    code = (
        "import sys, odyssey_core.envs\n"
        "heavy = [m for m in ('pyboy', 'alfworld', 'textworld', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

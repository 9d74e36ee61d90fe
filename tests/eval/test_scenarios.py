"""The packaged Section 4.2 scenario state: it holds the situation, ships with the package,
is the one the comparison presets and suite name, and the search expert makes it again."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from odyssey_core.eval.scenarios import (
    PACKAGED_STATES,
    SCENARIOS,
    check_scenario_state,
    expert_state_after,
    make_scenario_state,
    tall_pipe_two_walkers,
    write_scenario_state,
)

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = SCENARIOS["tall-pipe-two-walkers"]


def _first_frame(state: bytes) -> tuple[np.ndarray, dict]:
    from odyssey_core.envs import make_env

    env = make_env(SCENARIO.env_id)
    try:
        observation, info = env.reset(seed=0, options={"state": state})
    finally:
        env.close()
    return observation.image, info


def test_the_packaged_state_is_the_scenario_and_ships(odland_rom) -> None:
    info = check_scenario_state(SCENARIO)  # the situation, and the facts the index recorded
    assert info["level"] == "1-3" and info["lives"] == 3 and info["on_ground"]
    walkers = [o for o in info["objects"] if o["kind"] == "walker"]
    pipe = next(o for o in info["objects"] if o["kind"] == "block")
    assert pipe["y"] <= 80 and all(w["x"] > pipe["x"] for w in walkers) and len(walkers) == 2
    assert SCENARIO.path.parent.parent == PACKAGED_STATES and SCENARIO.path.is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["odyssey_core.envs.pyboy"]
    assert "states/*/*.state" in package_data and "states/*/index.json" in package_data
    # the path the presets and the eval suite name is this file
    from odyssey_core.eval.suites import load_curated_states, load_suite

    suite = load_suite("compare")
    [section] = suite.sections
    [state] = load_curated_states(ROOT / section.states.states_dir, SCENARIO.env_id)
    assert state.state == SCENARIO.path.read_bytes() and state.progress == info["progress"]
    assert (suite.max_turns, section.states.runs_per_state) == (80, 128)


def test_the_predicate() -> None:
    base = {"on_ground": True, "progress": 100, "camera_x": 40}
    walker = {"kind": "walker", "x": 150, "y": 96}
    tall = {"kind": "block", "x": 120, "y": 80}
    assert tall_pipe_two_walkers({**base, "objects": [tall, walker, {**walker, "x": 170}]})
    assert not tall_pipe_two_walkers({**base, "objects": [tall, walker]})  # one walker
    low = {**tall, "y": 96}
    assert not tall_pipe_two_walkers({**base, "objects": [low, walker, {**walker, "x": 170}]})
    off_screen = {**walker, "x": 190}  # 190 + 16 > 40 + 160
    assert not tall_pipe_two_walkers({**base, "objects": [tall, walker, off_screen]})
    assert not tall_pipe_two_walkers({**base, "on_ground": False, "objects": [tall, walker]})


@pytest.mark.slow
def test_the_search_expert_makes_it_again(odland_rom, tmp_path: Path) -> None:
    made = make_scenario_state(SCENARIO)
    path = write_scenario_state(made, tmp_path / SCENARIO.env_id / f"{SCENARIO.name}.state")
    check_scenario_state(SCENARIO, path)
    packaged_frame, packaged_info = _first_frame(SCENARIO.path.read_bytes())
    frame, info = _first_frame(made.state)
    np.testing.assert_array_equal(frame, packaged_frame)
    assert info == packaged_info and made.turn == 113
    # any env: the state after N expert turns (how a Super Mario Land state can be made)
    after = expert_state_after("odland-1-1", 3)
    assert after.turn == 3 and after.info["progress"] > 16

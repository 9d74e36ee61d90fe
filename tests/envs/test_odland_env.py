"""The odland environment on the real emulator and the packaged ROM."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from odyssey_core.envs import Observation, make_env
from odyssey_core.envs.pyboy.levels import ODLAND_LEVELS

VALID = "<perception>flat ground</perception><reasoning>go on</reasoning><answer>['right']</answer>"


@pytest.fixture()
def env(odland_rom):
    environment = make_env("odland-1-1", max_turns=60)
    yield environment
    environment.close()


def test_reset_gives_a_frame_the_task_and_the_level_facts(env) -> None:
    observation, info = env.reset(seed=0)
    assert isinstance(observation, Observation)
    assert observation.image.shape == (144, 160, 3) and observation.image.dtype == np.uint8
    assert observation.image.std() > 0, "the frame should not be blank"
    assert "1-1" in observation.text
    assert info["level"] == "1-1" and info["lives"] == 3 and info["turn"] == 0
    assert 0 < info["progress"] < info["max_progress"]
    assert info["invalid_action"] is False and info["fallback_count"] == 0


def test_turns_hold_5_or_15_frames_then_render_one(env) -> None:
    env.reset(seed=0)
    frames = env.pyboy.frame_count
    env.step(("right",))
    assert env.pyboy.frame_count - frames == 5 + 1
    frames = env.pyboy.frame_count
    env.step(("a", "right"))
    assert env.pyboy.frame_count - frames == 15 + 1
    frames = env.pyboy.frame_count
    env.step(("noop",))
    assert env.pyboy.frame_count - frames == 5 + 1


def test_reward_is_ten_times_the_progress_gained(env) -> None:
    _, info = env.reset(seed=0)
    before = info["progress"]
    _, reward, terminated, truncated, info = env.step(VALID)
    assert info["buttons"] == ("right",) and info["invalid_action"] is False
    assert info["progress"] > before
    assert reward == pytest.approx(10.0 * (info["progress"] - before))
    assert not terminated and not truncated
    rewards = [env.step(("left",))[1] for _ in range(4)]
    assert min(rewards) < 0, "walking back loses progress"


def test_jumping_moves_the_player_up(env) -> None:
    _, info = env.reset(seed=0)
    ground = info["player_y"]
    _, _, _, _, info = env.step(("a",))
    assert info["player_y"] < ground


def test_invalid_answers_fall_back_to_noop_and_are_counted(env) -> None:
    env.reset(seed=0)
    _, _, _, _, info = env.step("I would like to jump, please")
    assert info["invalid_action"] is True and info["buttons"] == ("noop",)
    assert info["parse_error"] == "no_answer"
    _, _, _, _, info = env.step("<answer>['a', 'b', 'right']</answer>")
    assert info["invalid_action"] is True and info["fallback_count"] == 2
    _, _, _, _, info = env.step(VALID)
    assert info["invalid_action"] is False and info["fallback_count"] == 2


def test_random_fallback_is_a_seeded_legal_action(odland_rom) -> None:
    def fallbacks(seed: int) -> list[tuple[str, ...]]:
        env = make_env("odland-1-1", invalid_action="random", max_turns=10)
        try:
            env.reset(seed=seed)
            return [env.step("no answer here")[4]["buttons"] for _ in range(8)]
        finally:
            env.close()

    first = fallbacks(3)
    assert first == fallbacks(3)
    legal = set(make_env("odland-1-1").legal_actions)
    assert all(buttons in legal for buttons in first)
    assert len(set(first)) > 1


def test_code_errors_are_not_silently_replaced(env) -> None:
    env.reset(seed=0)
    with pytest.raises(ValueError, match="illegal buttons"):
        env.step(("jump",))
    with pytest.raises(ValueError, match="at most 2"):
        env.step(("a", "b", "right"))
    with pytest.raises(ValueError, match="out of range"):
        env.step(len(env.legal_actions))
    with pytest.raises(TypeError, match="unsupported action"):
        env.step(3.5)


def test_save_and_load_state_replay_identically(env) -> None:
    env.reset(seed=0)
    for _ in range(3):
        env.step(("b", "right"))
    state = env.save_state()
    plan = [("a", "right"), ("right",), ("b", "right"), ("noop",)]

    def run() -> list:
        env.load_state(state)
        out = []
        for action in plan:
            observation, reward, _, _, info = env.step(action)
            out.append((observation.image.copy(), reward, info["progress"], info["turn"]))
        return out

    first, second = run(), run()
    for (f1, r1, p1, t1), (f2, r2, p2, t2) in zip(first, second, strict=True):
        assert np.array_equal(f1, f2) and (r1, p1, t1) == (r2, p2, t2)
    assert first[0][3] == 4, "the turn counter travels with the state"


def test_reset_from_a_state_starts_a_new_episode_there(env) -> None:
    env.reset(seed=0)
    for _ in range(4):
        _, _, _, _, info = env.step(("b", "right"))
    progress, state = info["progress"], env.save_state()
    observation, info = env.reset(options={"state": state})
    assert info["progress"] == progress and info["turn"] == 0
    assert np.array_equal(observation.image, env.render())


def test_episode_truncates_at_max_turns(odland_rom) -> None:
    env = make_env("odland-1-1", max_turns=3)
    try:
        env.reset(seed=0)
        results = [env.step(("noop",)) for _ in range(3)]
        assert [r[3] for r in results] == [False, False, True]
        with pytest.raises(RuntimeError, match="reset"):
            env.step(("noop",))
    finally:
        env.close()


def test_running_right_without_jumping_dies_and_earns_nothing_that_turn(env) -> None:
    _, info = env.reset(seed=0)
    for _ in range(200):
        _, reward, terminated, truncated, info = env.step(("b", "right"))
        if terminated or truncated:
            break
    assert terminated and info["life_lost"] and not info["goal_reached"]
    assert reward == 0.0
    assert info["lives"] == 2


def test_every_level_starts_and_later_levels_are_longer(odland_rom) -> None:
    lengths = []
    env = make_env("odland-1-1", max_turns=5)
    try:
        for level in ODLAND_LEVELS:
            observation, info = env.reset(options={"level": level})
            assert info["level"] == level and level in observation.text
            assert info["game_state"] == "playing"
            lengths.append(info["max_progress"])
    finally:
        env.close()
    assert lengths[0] > 160, "a level is wider than the screen"
    assert lengths[-1] > lengths[0]


def test_privileged_object_table(env) -> None:
    _, info = env.reset(seed=0)
    kinds = {obj["kind"] for obj in info["objects"]}
    assert kinds <= {"walker", "block", "gap", "goal"}
    for _ in range(30):
        _, _, terminated, _, info = env.step(("right",))
        kinds |= {obj["kind"] for obj in info["objects"]}
        if terminated:
            break
    assert kinds & {"walker", "block", "gap"}, "something lies ahead in 1-1"


def test_gymnasium_make(odland_rom) -> None:
    env = gymnasium.make("odyssey/odland-1-1", max_turns=5)
    try:
        observation, _ = env.reset(seed=0)
        assert set(observation) == {"image", "text"}
        assert env.observation_space.contains(observation)
        observation, reward, *_ = env.step(env.unwrapped.legal_actions.index(("right",)))
        assert env.observation_space.contains(observation) and reward > 0
    finally:
        env.close()


def test_a_fresh_env_renders_its_first_turn_like_a_replay(odland_rom) -> None:
    # PyBoy does not save its window-line counter; a fresh emulator must not draw the HUD
    # one line off on its first rendered turn.
    env = make_env("odland-1-1", max_turns=10)
    try:
        env.reset(seed=0)
        start = env.save_state()
        first = env.step(("b", "right"))[0].image
        env.load_state(start)
        assert np.array_equal(first, env.step(("b", "right"))[0].image)
    finally:
        env.close()

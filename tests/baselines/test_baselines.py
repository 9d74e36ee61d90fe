"""The classical deep-RL baseline (paper Appendix D): SB3 wrapper, Table 6 preset, a tiny run."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

from odyssey_core.baselines.sb3_ppo import (
    ENGINEERED_ACTIONS,
    ClassicalRLEnv,
    SB3PPOSettings,
    evaluate_sb3,
    load_sb3_ppo_settings,
    make_classical_env,
    train_sb3_ppo,
)
from odyssey_core.config import GameBoyEnvConfig
from odyssey_core.eval.scenarios import ScenarioError, expert_state_after, write_scenario_state

pytest.importorskip("stable_baselines3")

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "baselines" / "sb3_ppo.yaml"
SCENARIO = "tall-pipe-two-walkers"  # the task's scenario (configs/odysseus/compare.yaml)


class RecordingEmulator:
    """Delegates to a real PyBoy and records the button and tick calls of a turn."""

    def __init__(self, pyboy: Any) -> None:
        self._pyboy = pyboy
        self.calls: list[tuple[str, Any]] = []

    def button_press(self, button: str) -> None:
        self.calls.append(("press", button))
        self._pyboy.button_press(button)

    def button_release(self, button: str) -> None:
        self.calls.append(("release", button))
        self._pyboy.button_release(button)

    def tick(self, count: int = 1, render: bool = True) -> Any:
        self.calls.append(("tick", (count, render)))
        return self._pyboy.tick(count, render)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pyboy, name)


def _settings(**env: Any) -> Any:
    return SB3PPOSettings().env.model_copy(update=env)


def test_preset_has_table6_values() -> None:
    settings = load_sb3_ppo_settings(PRESET)
    ppo = settings.ppo
    assert (ppo.rollout_size, ppo.minibatch_size, ppo.n_epochs) == (8192, 1024, 4)
    assert ppo.learning_rate == pytest.approx(5e-5)
    assert (ppo.gamma, ppo.gae_lambda) == (0.95, 0.95)
    assert (ppo.clip_range, ppo.clip_range_vf, ppo.max_grad_norm) == (0.1, 0.1, 0.5)
    assert ppo.target_kl == pytest.approx(0.03)
    assert settings.total_timesteps == 380_000  # the Section 4.2 task's budget (see below)
    assert (settings.eval.every, settings.eval.episodes) == (10_000, 128)
    assert settings.n_steps * settings.n_envs == 8192
    # the VLM env's turn: same frame skip and reward
    game = settings.env.game
    assert (game.jump_hold_frames, game.hold_frames, game.settle_frames) == (15, 5, 1)
    assert game.reward_scale == 10.0
    with pytest.raises(ValueError, match="multiple of n_envs"):
        load_sb3_ppo_settings(PRESET, {"n_envs": 3})
    # App. D's "up to 2e6 samples" on the same scenario is an override away
    assert load_sb3_ppo_settings(PRESET, {"total_timesteps": 2_000_000}).total_timesteps == 2e6


def test_the_baseline_plays_exactly_the_rl_comparisons_task(tmp_path: Path) -> None:
    """App. D: "the same task used in Section 4.2": levels, start state, turn, 80 turns and the
    0.38M turn-sample budget all come from configs/odysseus/compare.yaml."""
    from odyssey_core.recipes.odysseus.settings import load_train_settings

    settings = load_sb3_ppo_settings(PRESET)
    rl = load_train_settings(ROOT / "configs" / "odysseus" / "compare.yaml")
    assert settings.task == (ROOT / "configs" / "odysseus" / "compare.yaml").resolve()
    assert settings.levels == rl.levels == ["odland-1-3"]
    assert settings.start_states == rl.rollout.start_states
    assert settings.total_timesteps == rl.max_turn_samples == 380_000
    assert settings.env.game == rl.env.model_copy(update={"max_turns": rl.rollout.max_turns})
    assert settings.env.game.max_turns == 80
    # a preset with a task may not say otherwise
    clash = tmp_path / "clash.yaml"
    clash.write_text(f"inherit: {PRESET}\nlevels: [odland-1-1]\n")
    with pytest.raises(ValueError, match="levels come from task"):
        load_sb3_ppo_settings(clash)
    # the Super Mario Land variant plays compare_mario.yaml's task: the user's state file
    with pytest.raises(ValueError, match=r"tall-pipe-two-enemies\.state"):
        load_sb3_ppo_settings(PRESET.with_name("sb3_ppo_mario.yaml"))
    with pytest.raises(ValueError, match="not trained on"):
        load_sb3_ppo_settings(PRESET, {"start_states": {"odland-2-1": str(PRESET)}})


def test_the_task_scenario_is_checked_before_training_or_evaluating(
    odland_rom, tmp_path: Path
) -> None:
    """The task's start state must be the scenario compare.yaml names for it, as for RL: a
    wrong state stops the baseline before any env or model, naming the fact."""
    settings = load_sb3_ppo_settings(PRESET)
    assert settings.start_scenarios == {"odland-1-3": SCENARIO}
    settings.check_start_states()  # the packaged state is the scenario
    with pytest.raises(ValueError, match="'tall-pipe-two-enemies': not a scenario of odland-1-3"):
        load_sb3_ppo_settings(PRESET, {"start_scenarios": {"odland-1-3": "tall-pipe-two-enemies"}})
    wrong = write_scenario_state(expert_state_after("odland-1-3", 2), tmp_path / "early.state")
    bad = load_sb3_ppo_settings(PRESET, {"start_states": {"odland-1-3": str(wrong)}})
    with pytest.raises(ScenarioError, match=f"{SCENARIO}: {wrong}: fact 'position'"):
        train_sb3_ppo(bad, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ScenarioError, match="fact 'position'"):
        evaluate_sb3(tmp_path / "model.zip", ["odland-1-3"], 1, settings=bad)
    stateless = settings.model_copy(update={"start_states": {}})
    with pytest.raises(ScenarioError, match=r"^start_scenarios\['odland-1-3'\] = .* but start_st"):
        stateless.check_start_states()


def test_episodes_start_from_the_task_state(odland_rom) -> None:
    settings = load_sb3_ppo_settings(PRESET)
    [(level, state)] = settings.start_states.items()
    env = make_classical_env(level, settings.env, state)
    try:
        for seed in (0, 1):
            _, info = env.reset(seed=seed)
            assert info["progress"] == 1156 and info["best_progress"] == 1156
            env.step(0)
    finally:
        env.close()


def test_cli_rejects_bad_env_count(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from odyssey_core.baselines.cli import baseline_group

    result = CliRunner().invoke(
        baseline_group,
        ["sb3-ppo", "--preset", str(PRESET), "--n-envs", "3", "--out", str(tmp_path / "x")],
    )
    assert result.exit_code != 0
    assert "multiple of n_envs" in result.output


@pytest.mark.parametrize(("space", "size"), [("original", 22), ("engineered", 8)])
def test_wrapper_spaces(space: str, size: int) -> None:
    env = make_classical_env("odland-1-1", _settings(action_space=space))
    try:
        assert env.action_space == gymnasium.spaces.Discrete(size)
        assert env.observation_space.shape == (84, 84, 1)
        observation, info = env.reset(seed=0)
        assert observation.dtype == np.uint8 and observation in env.observation_space
        assert info["env_id"] == "odland-1-1" and "best_progress" in info
        observation, reward, *_ = env.step(size - 1)
        assert observation in env.observation_space and math.isfinite(reward)
    finally:
        env.close()
    if space == "original":
        assert env.actions == [tuple(a) for a in env.unwrapped.legal_actions]
    else:
        assert env.actions == [buttons for _, buttons in ENGINEERED_ACTIONS]
        assert [name for name, _ in ENGINEERED_ACTIONS][2] == "RIGHT_SPRINT_JUMP"


def test_wrapper_can_keep_full_colour_frames() -> None:
    env = make_classical_env("odland-1-1", _settings(resize=None, grayscale=False))
    try:
        observation, _ = env.reset()
        assert observation.shape == env.observation_space.shape == (144, 160, 3)
        np.testing.assert_array_equal(observation, env.unwrapped.render())
    finally:
        env.close()


def test_three_button_action_is_one_ordinary_turn() -> None:
    env = make_classical_env("odland-1-1", _settings(action_space="engineered"))
    try:
        _, info = env.reset()
        base = env.unwrapped
        recorder = RecordingEmulator(base.pyboy)
        base._pyboy = recorder  # spy on the emulator calls of the turns below
        before = info["progress"]
        rewards = []
        for _ in range(6):
            recorder.calls.clear()
            frame_before = recorder.frame_count
            _, reward, terminated, truncated, info = env.step(2)  # RIGHT_SPRINT_JUMP
            presses = {b for kind, b in recorder.calls if kind == "press"}
            releases = {b for kind, b in recorder.calls if kind == "release"}
            ticks = [arg for kind, arg in recorder.calls if kind == "tick"]
            assert presses == releases == {"right", "a", "b"}
            assert ticks == [(15, False), (1, True)]  # held 15 frames with 'a', 1 rendered
            assert recorder.frame_count - frame_before == 16
            assert info["buttons"] == ("right", "a", "b")
            assert not info["life_lost"]
            assert reward == pytest.approx(10.0 * (info["progress"] - before))
            before = info["progress"]
            rewards.append(reward)
            if terminated or truncated:
                break
        assert sum(rewards) > 0  # running and jumping right moves right
    finally:
        base._pyboy = recorder._pyboy
        env.close()


def test_three_buttons_need_the_code_limit_raised_and_model_text_stays_at_two() -> None:
    from odyssey_core.envs import make_env

    wrapped = make_classical_env("odland-1-1", _settings(action_space="engineered"))
    plain = make_env("odland-1-1")
    try:
        plain.reset()
        assert wrapped.unwrapped.config.max_code_buttons == 3
        assert len(plain.legal_actions) == len(wrapped.unwrapped.legal_actions) == 22
        with pytest.raises(ValueError, match="at most 2 buttons"):
            plain.step(("right", "a", "b"))
        with pytest.raises(ValueError, match="max_code_buttons=3"):
            ClassicalRLEnv(make_env("odland-1-1"), "engineered")
        wrapped.reset()
        _, _, _, _, info = wrapped.unwrapped.step("<answer>['right', 'a', 'b']</answer>")
        assert info["invalid_action"] and info["parse_error"] == "too_many_buttons"
    finally:
        plain.close()
        wrapped.close()


def test_tiny_training_run_saves_reloads_and_evaluates(tmp_path: Path) -> None:
    settings = load_sb3_ppo_settings(
        PRESET,
        {
            "total_timesteps": 128,
            "n_envs": 2,
            "vec_env": "dummy",
            "device": "cpu",
            "torch_threads": 1,
            "ppo": {"rollout_size": 64, "minibatch_size": 32, "n_epochs": 2},
            "eval": {"every": 128, "episodes": 2, "n_envs": 1},
            "env": {"game": GameBoyEnvConfig(max_turns=20).model_dump()},
        },
    )
    assert settings.levels == ["odland-1-3"] and settings.start_states  # the task's scenario
    logged: list[str] = []
    model_path = train_sb3_ppo(settings, tmp_path, log=logged.append)
    assert model_path.is_file() and model_path.suffix == ".zip"
    assert any(line.startswith("steps") for line in logged)

    with (tmp_path / "monitor.csv").open() as handle:
        handle.readline()  # SB3's JSON header line
        episodes = list(csv.DictReader(handle))
    assert episodes, "20-turn episodes must finish within 128 samples"
    assert {"r", "l", "progress", "best_progress", "env_id"} <= set(episodes[0])
    assert all(int(e["l"]) <= 20 and e["env_id"] == "odland-1-3" for e in episodes)
    assert all(float(e["best_progress"]) >= 1156 for e in episodes)  # from the start state

    with (tmp_path / "evaluations.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["timesteps"] for r in rows] == ["128"]

    results = evaluate_sb3(model_path, ["odland-1-3"], 2)
    level = results["odland-1-3"]
    assert level.episodes == 2 and level.mean >= 1156  # evaluated from the same state
    assert math.isfinite(level.mean) and math.isfinite(level.stderr) and level.stderr >= 0
    # odland learns a level's goal x when it starts the level itself, which an env that only
    # ever loads the scenario state never does (an env-side gap, not the baseline's)
    assert level.max_progress in (None, 1448)

"""ALFWorld on the real alfworld / TextWorld engine, with games Odyssey generates.

`make test` installs the alfworld extra, so nothing here is skipped there.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path

import gymnasium
import model_fixtures
import numpy as np
import pytest
import torch

from odyssey_core.envs import ENVIRONMENTS, make_env
from odyssey_core.envs.alfworld import TASK_TYPES, generate_game, write_games
from odyssey_core.envs.alfworld.engine import find_game_files
from odyssey_core.envs.alfworld.env import (
    GOAL_REWARD,
    INADMISSIBLE_REWARD,
    SUBGOAL_REWARD,
    AlfWorldEnv,
)
from odyssey_core.protocol.gtr_format import format_gtr_response
from odyssey_core.recipes.gtr.corrector import make_corrector
from odyssey_core.recipes.gtr.rewards import GTRWrapper

tiny_model_dir = model_fixtures.tiny_model_dir


@pytest.fixture(scope="module")
def env():
    environment = make_env("alfworld")
    yield environment
    environment.close()


def _play_plan(environment: AlfWorldEnv, info: dict) -> tuple[list[float], dict, bool]:
    """Follow the planner's plan (re-read each step) to the end of the episode."""
    rewards: list[float] = []
    terminated = truncated = False
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = environment.step(info["expert_plan"][0])
        rewards.append(reward)
    return rewards, info, terminated


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_each_task_type_is_solved_by_its_plan_with_goal_and_subgoal_rewards(
    env: AlfWorldEnv, task_type: str
) -> None:
    obs, info = env.reset(seed=7, options={"task_type": task_type})
    assert info["task_type"] == task_type and info["expert_plan"]
    assert info["task"] in obs.text and "Admissible actions: " in obs.text
    assert all(command in obs.text for command in info["legal_actions"])
    assert info["subgoals_done"] == [False] * len(info["subgoals"])
    rewards, last, won = _play_plan(env, info)
    assert won and last["success"] and last["progress"] == 1.0
    assert rewards[-1] == GOAL_REWARD + SUBGOAL_REWARD * len(last["subgoals_new"])
    # Every sub-goal pays exactly once on the way; nothing is negative on a clean run.
    assert sum(rewards) == GOAL_REWARD + SUBGOAL_REWARD * len(last["subgoals"])
    assert all(r >= 0 for r in rewards) and all(last["subgoals_done"])
    # The history of actions is in the text.
    assert last["history"] and f"1. {last['history'][0]}" in env.observation_text()


def test_inadmissible_action_costs_one_and_changes_nothing(env: AlfWorldEnv) -> None:
    obs, info = env.reset(seed=3, options={"task_type": "pick_heat_then_place_in_recep"})
    for attempt in ("fly to the moon", format_gtr_response("I will dance.", "dance wildly")):
        after, reward, terminated, truncated, step_info = env.step(attempt)
        assert reward == INADMISSIBLE_REWARD and step_info["invalid_action"]
        assert not (terminated or truncated)
        assert np.array_equal(after.image, obs.image) and after.text == obs.text
        assert step_info["state_key"] == info["state_key"]
        assert step_info["legal_actions"] == info["legal_actions"]
    assert step_info["inadmissible_count"] == 2 and step_info["action"] == "dance wildly"
    # The model's answer format naming an admissible command plays it.
    command = info["expert_plan"][0]
    _, _, _, _, step_info = env.step(format_gtr_response("Go there first.", command))
    assert not step_info["invalid_action"] and step_info["history"] == [command]


def test_images_are_uint8_and_follow_the_state(env: AlfWorldEnv) -> None:
    obs, info = env.reset(seed=1, options={"task_type": "pick_cool_then_place_in_recep"})
    assert obs.image.dtype == np.uint8 and obs.image.shape == (320, 480, 3)
    assert env.observation_space.contains(obs.image)
    frames = [obs.image]
    for command in info["expert_plan"][:3]:
        obs, *_ = env.step(command)
        frames.append(obs.image)
    assert all(not np.array_equal(a, b) for a, b in itertools.pairwise(frames))
    assert np.array_equal(env.render(), frames[-1])


def test_same_seed_same_game_and_frames_other_seed_other_game(env: AlfWorldEnv) -> None:
    first, info1 = env.reset(seed=11)
    second, info2 = env.reset(seed=11)
    assert first.text == second.text and np.array_equal(first.image, second.image)
    assert info1["expert_plan"] == info2["expert_plan"]
    third, _ = env.reset(seed=12)
    assert third.text != first.text
    a, b = generate_game("pick_two_obj_and_place", 5), generate_game("pick_two_obj_and_place", 5)
    assert a == b and a.problem_pddl() == b.problem_pddl()
    assert a != generate_game("pick_two_obj_and_place", 6)


def test_truncation_after_max_steps() -> None:
    environment = make_env("alfworld-look", max_steps=2, expert_plan=False)
    try:
        _, info = environment.reset(seed=0)
        assert info["expert_plan"] == []
        _, _, terminated, truncated, _ = environment.step("look")
        assert not (terminated or truncated)
        _, _, terminated, truncated, _ = environment.step("inventory")
        assert truncated and not terminated
        with pytest.raises(RuntimeError):
            environment.step("look")
    finally:
        environment.close()


def test_registry_names_and_gymnasium_make() -> None:
    names = {"alfworld", "alfworld-pick", "alfworld-look", "alfworld-clean", "alfworld-heat"}
    assert names | {"alfworld-cool", "alfworld-pick2"} <= set(ENVIRONMENTS.names())
    environment = gymnasium.make("odyssey/alfworld-clean")
    try:
        obs, info = environment.reset(seed=0)
        assert set(obs) == {"image", "text"} and environment.observation_space.contains(obs)
        assert info["task_type"] == "pick_clean_then_place_in_recep"
        obs, *_ = environment.step(info["expert_plan"][0])
        assert obs["image"].shape == (320, 480, 3)
    finally:
        environment.close()


def test_written_games_load_like_official_data(tmp_path: Path) -> None:
    files = write_games(tmp_path, 1, task_types=["pick_and_place_simple", "look_at_obj_in_light"])
    assert len(files) == 2
    for game_file in files:
        folder = game_file.parent
        assert (folder / "initial_state.pddl").is_file()
        traj = json.loads((folder / "traj_data.json").read_text())
        assert traj["task_type"] in TASK_TYPES and traj["pddl_params"]["object_target"]
        game = json.loads(game_file.read_text())
        assert game["solvable"] and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"]
    assert find_game_files(tmp_path, ["look_at_obj_in_light"]) == [files[1]]
    # alfworld's own loader finds the same games.
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2]},
        "dataset": {"data_path": str(tmp_path), "num_train_games": -1},
    }
    assert sorted(AlfredTWEnv(config, train_eval="train").game_files) == sorted(map(str, files))
    # data_path plays them, following the stored walkthrough to the goal.
    environment = AlfWorldEnv(data_path=tmp_path, task_types=["look"])
    try:
        _, info = environment.reset(seed=0)
        assert info["game_file"] == str(files[1])
        for command in json.loads(files[1].read_text())["walkthrough"]:
            _, reward, terminated, _, info = environment.step(command)
        assert terminated and info["won"] and reward >= GOAL_REWARD
    finally:
        environment.close()


def test_alfworld_corrector_follows_the_plan_inside_the_gtr_wrapper() -> None:
    corrector = make_corrector("alfworld")
    wrapped = GTRWrapper(make_env("alfworld-heat"), corrector)
    try:
        _, info = wrapped.reset(seed=2)
        plan = info["expert_plan"]
        good = format_gtr_response(
            '"location": "the middle of the room", "holding": "nothing", '
            f'"subgoal": "{info["subgoals"][0]}", "thoughts": "start"',
            plan[0],
        )
        _, reward, _, _, step_info = wrapped.step(good)
        correction = step_info["gtr"]["correction"]
        assert correction.agrees and correction.action == plan[0] and correction.solvable
        assert reward == pytest.approx(0.1)  # format reward only
        # A wrong reading and an off-plan action are corrected toward the plan's next step.
        next_step = step_info["expert_plan"][0]
        wrong = format_gtr_response('"holding": "a mug 7", "thoughts": "look"', "look")
        _, _, _, _, step_info = wrapped.step(wrong)
        correction = step_info["gtr"]["correction"]
        assert not correction.agrees and correction.details["holding_ok"] is False
        assert correction.action == next_step and next_step in correction.as_response()
    finally:
        wrapped.close()


def test_missing_data_path_is_a_clear_error(tmp_path: Path) -> None:
    environment = AlfWorldEnv(data_path=tmp_path / "nowhere")
    try:
        with pytest.raises(FileNotFoundError, match=r"json_2\.1\.1"):
            environment.reset(seed=0)
    finally:
        environment.close()


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fast_downward", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'odyssey-core\[alfworld\]'"):
        AlfWorldEnv()


@pytest.mark.slow
def test_one_gtr_step_on_the_tiny_alfworld_preset(tiny_model_dir: Path, tmp_path: Path) -> None:
    from odyssey_core.models.loading import load_model, load_processor
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.recipes.gtr.prompts import gtr_system_prompt
    from odyssey_core.recipes.gtr.settings import load_gtr_settings
    from odyssey_core.recipes.gtr.train import build_trainer

    torch.set_num_threads(1)  # see model_fixtures: tiny models on a busy machine
    settings = load_gtr_settings("alfworld_tiny")
    assert settings.ppo.thought_weight == 0.2 and settings.rollout.corrector == "alfworld"
    policy = HFPolicy(
        load_model(tiny_model_dir).eval(),
        load_processor(tiny_model_dir),
        system_prompt=gtr_system_prompt(settings.rollout.env),
        image_size=settings.model.image_size,
    )
    trainer = build_trainer(settings, tmp_path, policy=policy)
    try:
        metrics = trainer.train_step()
        assert metrics["rollout/turns"] == 4 and metrics["actor/updates"] >= 1
        # Every turn gets a planner-backed correction, which thought cloning then uses.
        assert metrics["dagger/added"] == 4 and np.isfinite(metrics["sft/loss"])
        buffer = trainer.hook("thought_cloning").buffer
        assert '"subgoal": "take a' in buffer.examples[0].thought
    finally:
        trainer.close()


def test_official_style_ids_and_floor_plans(tmp_path: Path) -> None:
    """ALFRED writes ids like ``Mug_bar__minus_01_dot_50_bar_...`` and numbers floor plans by
    room (1-30 kitchens); the demangler and the room lookup handle both."""
    game = generate_game("pick_clean_then_place_in_recep", 4)
    assert game.room == "kitchen"
    game_file = game.write(tmp_path / "official-like" / "trial_T0")
    data = json.loads(game_file.read_text())
    problem = data["pddl_problem"]
    ids = [oid for oid, _, _ in game.objects] + [rid for rid, _ in game.receptacles]
    for k, old in enumerate(ids):
        kind = old.split("_bar_")[0]
        suffix = "_bar_SinkBasin" if old.endswith("SinkBasin") else ""
        position = f"_bar__minus_0{k % 10}_dot_{k:02d}_bar__plus_00_dot_90"
        new = f"{kind}{position}{suffix}"
        problem = re.sub(rf"\b{re.escape(old)}\b", new, problem)
    data["pddl_problem"] = problem
    game_file.write_text(json.dumps(data))
    traj = json.loads((game_file.parent / "traj_data.json").read_text())
    traj["scene"] = {"floor_plan": "FloorPlan12", "scene_num": 12}
    (game_file.parent / "traj_data.json").write_text(json.dumps(traj))

    environment = AlfWorldEnv(data_path=tmp_path, task_types=["clean"])
    try:
        _, info = environment.reset(seed=0)
        assert info["room"] == "kitchen" and "sinkbasin 1" in " ".join(info["legal_actions"])
        rewards, last, won = _play_plan(environment, info)
        assert won and sum(rewards) == GOAL_REWARD + SUBGOAL_REWARD * len(last["subgoals"])
    finally:
        environment.close()

"""The search expert, the random agent, episode videos and `odyssey play`."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from click.testing import CliRunner

from odyssey_core.agents import RandomAgent, SearchExpert
from odyssey_core.cli import main
from odyssey_core.envs import make_env
from odyssey_core.eval.episode import play_episode
from odyssey_core.eval.video import EpisodeVideoWriter


def test_expert_leaves_the_env_where_it_found_it(odland_rom) -> None:
    env = make_env("odland-1-1", max_turns=30)
    try:
        env.reset(seed=0)
        env.step(("right",))
        before = env.save_state()
        expert = SearchExpert(max_nodes=20)
        expert.reset(env)
        action = expert.act(env, None, {})
        assert env.save_state() == before
        assert action in expert.actions and expert.expanded == 20
    finally:
        env.close()


def test_expert_replans_when_the_env_leaves_its_plan(odland_rom) -> None:
    env = make_env("odland-1-1", max_turns=30)
    try:
        observation, info = env.reset(seed=0)
        expert = SearchExpert(max_nodes=30)
        expert.reset(env)
        chosen = expert.act(env, observation, info)
        observation, _, _, _, info = env.step(chosen)
        expert.act(env, observation, info)
        assert expert.searches == 1, "on the plan: no new search"
        observation, _, _, _, info = env.step(("left",))  # not what the expert chose
        expert.act(env, observation, info)
        assert expert.searches == 2
    finally:
        env.close()


def test_expert_outplays_random_on_1_1(odland_rom) -> None:
    env = make_env("odland-1-1", max_turns=40)
    try:
        expert = play_episode(env, SearchExpert(max_nodes=300), seed=0)
        random = play_episode(env, RandomAgent(seed=0), seed=0)
    finally:
        env.close()
    assert expert.progress > random.progress
    assert not expert.life_lost


@pytest.mark.slow
@pytest.mark.parametrize("level", ["1-1", "1-2", "1-3"])
def test_expert_finishes_the_first_world(odland_rom, level: str) -> None:
    env = make_env(f"odland-{level}", max_turns=400)
    try:
        result = play_episode(env, SearchExpert(), seed=0)
    finally:
        env.close()
    assert result.goal_reached, result.summary()
    assert result.progress >= result.max_progress - 16


def test_video_frames_are_upscaled_with_a_panel(tmp_path: Path) -> None:
    frame = np.zeros((144, 160, 3), dtype=np.uint8)
    frame[:, :80] = 200
    path = tmp_path / "clip.mp4"
    with EpisodeVideoWriter(path, scale=3, panel_width=240) as video:
        composed = video.compose(frame, ["turn 1", "buttons: a, right"])
        for _ in range(3):
            video.add(frame, ["turn 1", "buttons: a, right"])
    assert composed.shape == (432, 720, 3)
    assert composed[:, 480:].max() > 200, "the panel carries text"
    frames = iio.imread(path, index=None)
    assert frames.shape[0] == 3 and frames.shape[1:3] == (432, 720)


def test_play_command_writes_a_video(odland_rom, tmp_path: Path) -> None:
    video = tmp_path / "random.mp4"
    result = CliRunner().invoke(
        main,
        ["play", "odland-1-1", "--agent", "random", "--max-turns", "6", "--video", str(video)],
    )
    assert result.exit_code == 0, result.output
    assert "odland-1-1 with random" in result.output
    frames = iio.imread(video, index=None)
    assert frames.shape[0] >= 2


def test_play_command_explains_a_missing_mario_rom(monkeypatch) -> None:
    monkeypatch.delenv("ODYSSEY_SML_ROM", raising=False)
    result = CliRunner().invoke(main, ["play", "mario-1-1", "--agent", "random"])
    assert result.exit_code != 0
    assert "ODYSSEY_SML_ROM" in result.output

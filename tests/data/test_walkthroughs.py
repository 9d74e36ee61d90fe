"""Walkthrough recording (video + sidecar + states) and video import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
import pyarrow.parquet as pq
import pytest

from odyssey_core.data.walkthroughs import (
    SIDECAR_COLUMNS,
    ImportConfig,
    RecordConfig,
    import_video,
    load_walkthroughs,
    record_walkthrough,
    video_info,
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("walk")
    config = RecordConfig(
        levels=["1-1"], agent="random", agent_kwargs={"seed": 3}, max_turns=25, state_every=10
    )
    return record_walkthrough(config, "1-1", out), out


def test_record_writes_video_sidecar_and_states(recorded) -> None:
    walk, out = recorded
    table = pq.read_table(walk.sidecar)
    assert tuple(table.schema.names) == SIDECAR_COLUMNS
    rows = table.to_pylist()
    assert walk.frame_count == len(rows) > 0
    fps, count = video_info(walk.video)
    assert count == walk.frame_count and fps == pytest.approx(8.0)
    reader = imageio.get_reader(walk.video, format="FFMPEG")
    first = reader.get_data(0)
    reader.close()
    assert first.shape == (288, 320, 3)  # x2 pixel repetition of 160x144
    assert [r["frame_index"] for r in rows] == list(range(len(rows)))
    assert all(1 <= len(r["buttons_next"]) <= 2 for r in rows)
    assert rows[1]["timestamp_s"] == pytest.approx(1 / 8)
    json.loads(rows[0]["objects"])
    with_state = [r for r in rows if r["state_file"]]
    assert [r["frame_index"] for r in with_state] == list(range(0, len(rows), 10))
    assert (out / with_state[0]["state_file"]).stat().st_size > 1000
    assert load_walkthroughs(out)[0] == walk


def test_saved_state_replays_the_recorded_actions(recorded) -> None:
    from odyssey_core.envs import make_env

    walk, out = recorded
    rows = pq.read_table(walk.sidecar).to_pylist()
    if len(rows) <= 12:
        pytest.skip("the random agent died too early for a second state")
    env = make_env("odland-1-1", max_turns=100)
    env.reset(seed=0)
    env.load_state((out / rows[10]["state_file"]).read_bytes())
    _, _, _, _, info = env.step(tuple(rows[10]["buttons_next"]))
    assert info["progress"] == rows[11]["progress"]


def test_expert_walkthrough_makes_progress(tmp_path: Path) -> None:
    config = RecordConfig(agent="expert", agent_kwargs={"max_nodes": 60}, max_turns=10)
    walk = record_walkthrough(config, "1-1", tmp_path)
    rows = pq.read_table(walk.sidecar).to_pylist()
    assert walk.source == "record:expert" and walk.frame_count == 10
    assert rows[-1]["progress"] > rows[0]["progress"]


def _synthetic_video(path: Path, seconds: float = 3.0, fps: int = 10) -> Path:
    with imageio.get_writer(path, format="FFMPEG", fps=fps, macro_block_size=1) as writer:
        for i in range(int(seconds * fps)):
            frame = np.zeros((144, 160, 3), np.uint8)
            frame[:, : (i * 5) % 160] = 200
            writer.append_data(frame)
    return path


def test_import_video_validates_segments(tmp_path: Path) -> None:
    video = _synthetic_video(tmp_path / "user.mp4")
    out = tmp_path / "walk"
    segments = [
        {"level": "1-1", "start_s": 0, "end_s": 1.5},
        {"level": "1-2", "start_s": 1.5, "end_s": 3},
    ]
    walk = import_video(ImportConfig(video=video, segments=segments), out)
    assert walk.sidecar is None and walk.level is None and walk.frame_count == 30
    assert Path(walk.video).parent == out and walk.source == "import:user.mp4"
    bad = [
        [{"level": "9-9", "start_s": 0, "end_s": 1}],
        [{"level": "1-1", "start_s": 0, "end_s": 10}],
        [{"level": "1-1", "start_s": 0, "end_s": 2}, {"level": "1-2", "start_s": 1, "end_s": 3}],
    ]
    for segs in bad:
        with pytest.raises(ValueError):
            import_video(ImportConfig(video=video, segments=segs), out)
    with pytest.raises(ValueError):
        ImportConfig(video=video, segments=[{"level": "1-1", "start_s": 2, "end_s": 1}])


# ------------------------------------------------------------------ episodes and exploration
def test_episodes_explore_with_detours_that_are_not_recorded(tmp_path: Path) -> None:
    from odyssey_core.agents.expert import DEFAULT_ACTIONS
    from odyssey_core.data.walkthroughs import record_walkthroughs

    config = RecordConfig(
        agent="expert",
        agent_kwargs={"max_nodes": 40},
        max_turns=16,
        episodes_per_level=2,
        explore_prob=1.0,  # a detour as soon as the previous one is past its window
        explore_turns=2,
        recover_turns=3,
    )
    clean, explored = record_walkthroughs(config, tmp_path)
    assert (clean.name, explored.name) == ("odland-1-1", "odland-1-1-ep1")
    assert clean.extra["detours"] == 0 and clean.extra["episode"] == 0
    assert explored.extra["detours"] >= 2 and explored.extra["detour_turns"] >= 2
    assert explored.extra["seed"] == 1 and explored.extra["explore_prob"] == 1.0
    rows = pq.read_table(explored.sidecar).to_pylist()
    # Every recorded frame is labelled with the expert's own choice, never a random button.
    assert all(tuple(r["buttons_next"]) in DEFAULT_ACTIONS for r in rows)
    assert [r["frame_index"] for r in rows] == list(range(len(rows)))
    turns = [r["turn"] for r in rows]
    assert turns == sorted(set(turns)) and turns[-1] >= len(rows)  # detour turns leave gaps
    assert video_info(explored.video)[1] == explored.frame_count == len(rows)
    names = {w.name for w in load_walkthroughs(tmp_path)}
    assert names == {"odland-1-1", "odland-1-1-ep1"}


def test_exploration_needs_an_exploring_episode() -> None:
    with pytest.raises(ValueError, match="clean_episodes"):
        RecordConfig(explore_prob=0.1)  # one episode per level, and it is the clean one
    assert RecordConfig(explore_prob=0.1, clean_episodes=0).walkthrough_name("1-2", 3) == (
        "odland-1-2-ep3"
    )


class _DoomEnv:
    """A stand-in platformer: ``right`` advances, ``down`` dooms the hero two turns later.

    The frame's grey level encodes the progress, so the test can check which frames made it
    into the video."""

    supports_save_state = True

    def __init__(self, max_turns: int) -> None:
        self.legal_actions = [("right",), ("down",)]
        self.max_turns = max_turns
        self.x, self.turn, self.doom = 0, 0, -1

    def _obs(self) -> tuple[Any, dict[str, Any]]:
        from odyssey_core.envs.base import Observation

        image = np.full((144, 160, 3), 8 * self.x, np.uint8)
        return Observation(image=image, text="t"), {"progress": self.x, "turn": self.turn}

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.x, self.turn, self.doom = 0, 0, -1
        return self._obs()

    def step(self, action: tuple[str, ...]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        self.x += action == ("right",)
        if action == ("down",) and self.doom < 0:
            self.doom = 2
        self.doom -= self.doom > 0
        lost = self.doom == 0
        obs, info = self._obs()
        info.update(buttons=action, life_lost=lost)
        return obs, 0.0, lost, not lost and self.turn >= self.max_turns, info

    def save_state(self) -> bytes:
        return json.dumps([self.x, self.turn, self.doom]).encode()

    def load_state(self, state: bytes) -> None:
        self.x, self.turn, self.doom = json.loads(state)

    def close(self) -> None:
        pass


class _RightAgent:
    def reset(self, env: Any, seed: int | None = None) -> None:
        pass

    def act(self, env: Any, observation: Any, info: dict[str, Any]) -> tuple[str, ...]:
        return ("right",)


def test_detour_leading_to_a_death_is_undone(tmp_path: Path, monkeypatch) -> None:
    import odyssey_core.agents
    import odyssey_core.envs

    envs: list[_DoomEnv] = []

    def make_env(name: str, max_turns: int) -> _DoomEnv:
        envs.append(_DoomEnv(max_turns))
        return envs[-1]

    monkeypatch.setattr(odyssey_core.envs, "make_env", make_env)
    monkeypatch.setattr(odyssey_core.agents, "make_agent", lambda name, **kw: _RightAgent())
    config = RecordConfig(
        max_turns=30,
        episodes_per_level=1,
        clean_episodes=0,
        explore_prob=0.5,
        explore_turns=1,
        recover_turns=4,
        state_every=1,
        scale=1,
    )
    walk = record_walkthrough(config, "1-1", tmp_path)
    rows = pq.read_table(walk.sidecar).to_pylist()
    # Deaths came two turns after a `down` detour, within the window: all were undone, so the
    # episode ran to its turn limit and no recorded frame was doomed.
    assert walk.extra["undone_detours"] >= 1 and not walk.extra["goal_reached"]
    assert envs[0].turn == 30 and envs[0].doom != 0  # truncated, not dead
    progress = [r["progress"] for r in rows]
    assert progress == sorted(set(progress)) and all(r["buttons_next"] == ["right"] for r in rows)
    reader = imageio.get_reader(walk.video, format="FFMPEG")
    greys = [round(float(np.asarray(f).mean()) / 8) for f in reader]
    reader.close()
    assert greys == progress  # the frames of undone detours left the video too
    states = sorted((tmp_path / f"{walk.name}.states").iterdir())
    assert len(states) == len(rows)  # and their save states were deleted


def test_odland_2k_preset_records_varied_walkthroughs() -> None:
    from odyssey_core.data.cli import load_curate_config

    config = load_curate_config("odland-2k")
    record = config.record
    assert record.episodes_per_level > record.clean_episodes == 1 and record.explore_prob > 0
    assert config.sampling.total_frames == 2000 and config.teacher.name == "programmatic"

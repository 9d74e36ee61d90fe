"""Frames on disk: the store, the list-like view, and TurnBatch keeping large batches' frames
out of memory (spill, select, concat, save/load, the ODYSSEY_FRAMES_ON_DISK threshold)."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from odyssey_core.rl.critic import CriticTrainer
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.frames import (
    SPILL_ENV,
    FrameStore,
    FrameView,
    concat_frames,
    spill_threshold,
    store_frames,
    take_frames,
)

ROOT = Path(__file__).resolve().parents[2]


def frames_for(n: int, seed: int = 0, shape: tuple[int, int, int] = (12, 10, 3)) -> list:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


def batch_of(episodes: tuple[int, ...], seed: int = 0) -> TurnBatch:
    ids = [e for e, length in enumerate(episodes) for _ in range(length)]
    turns = [t for length in episodes for t in range(length)]
    n = len(ids)
    return TurnBatch(
        episode_ids=torch.tensor(ids),
        turn_index=torch.tensor(turns),
        levels=["odland-1-1"] * n,
        frames=frames_for(n, seed),
        prompt_ids=[torch.arange(3 + i) for i in range(n)],
        response_ids=[torch.arange(2)] * n,
        thought_mask=[torch.tensor([True, False])] * n,
        action_mask=[torch.tensor([False, True])] * n,
        behaviour_logprobs=[torch.full((2,), -0.5)] * n,
        rewards=torch.arange(n, dtype=torch.float32),
        terminated=torch.tensor([t == length - 1 for length in episodes for t in range(length)]),
        truncated=torch.zeros(n, dtype=torch.bool),
    )


def assert_same_frames(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.uint8 and np.array_equal(a, b)


# ----------------------------------------------------------------------------- the store


def test_store_writes_each_frame_once_and_reads_it_back(tmp_path: Path) -> None:
    frames = frames_for(5) + frames_for(2, seed=1, shape=(4, 6, 3))  # shapes may differ
    store = FrameStore(tmp_path)
    assert [store.append(f) for f in frames] == list(range(7))
    assert store.folder.parent == tmp_path
    assert store.path.stat().st_size == store.nbytes == sum(f.nbytes for f in frames)
    for row, frame in enumerate(frames):
        got = store.read(row)
        assert np.array_equal(got, frame) and got.flags.writeable
    got[0, 0, 0] ^= 1  # a read is a private copy
    assert np.array_equal(store.read(6), frames[6])
    with pytest.raises(IndexError):
        store.read(7)
    with pytest.raises(ValueError, match="uint8"):
        store.append(np.zeros((2, 2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="uint8"):
        store.append(np.zeros((2, 2), dtype=np.uint8))


def test_the_folder_goes_with_the_last_view(tmp_path: Path) -> None:
    view = store_frames(frames_for(3), tmp_path)
    folder = view.store.folder
    part = view.select([2])
    del view
    gc.collect()
    assert folder.is_dir()  # `part` still holds the store
    assert np.array_equal(part[0], frames_for(3)[2])
    del part
    gc.collect()
    assert not folder.exists()

    store = FrameStore(tmp_path)
    store.append(frames_for(1)[0])
    folder = store.folder
    store.close()
    assert not folder.exists() and store.closed
    with pytest.raises(ValueError, match="closed"):
        store.read(0)


def test_stores_go_under_the_configured_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODYSSEY_FRAMES_DIR", str(tmp_path / "frames-root"))
    store = FrameStore()
    assert store.folder.parent == tmp_path / "frames-root"


def test_view_indexes_like_a_list(tmp_path: Path) -> None:
    frames = frames_for(6)
    view = store_frames(frames, tmp_path)
    assert isinstance(view, FrameView) and len(view) == 6
    assert np.array_equal(view[-1], frames[-1])
    assert isinstance(view[1:4], list)
    assert_same_frames(view[1:4], frames[1:4])
    assert_same_frames(list(view), frames)
    picked = view.select([5, 0, 5])
    assert_same_frames(picked, [frames[5], frames[0], frames[5]])
    assert_same_frames(picked.select([1]), [frames[0]])
    assert_same_frames(take_frames(view, [3, 2]), [frames[3], frames[2]])
    assert isinstance(take_frames(view, [3, 2]), FrameView)
    assert_same_frames(take_frames(frames, [3, 2]), [frames[3], frames[2]])
    with pytest.raises(IndexError):
        view.select([6])
    # another process gets the frames themselves, not a path into this one's folder
    copy = pickle.loads(pickle.dumps(view))
    assert isinstance(copy, list)
    assert_same_frames(copy, frames)


def test_concat_keeps_lists_lists_and_disk_on_disk(tmp_path: Path) -> None:
    a, b = frames_for(2), frames_for(3, seed=1)
    assert concat_frames([a, b]) == [*a, *b]
    joined = concat_frames([store_frames(a, tmp_path), b], tmp_path)
    assert isinstance(joined, FrameView)
    assert_same_frames(joined, [*a, *b])


# ----------------------------------------------------------------------------- TurnBatch


def test_spilled_batch_reads_like_the_list_one(tmp_path: Path) -> None:
    batch = batch_of((3, 2))
    frames = list(batch.frames)
    assert batch.spill_frames(tmp_path, above=5) is batch and not batch.frames_on_disk
    assert batch.spill_frames(tmp_path, above=4) is batch and batch.frames_on_disk
    assert_same_frames(batch.frames, frames)
    assert batch.spill_frames(tmp_path) is batch  # already on disk: nothing to do

    picked = batch.select([4, 1])
    assert isinstance(picked.frames, FrameView)
    assert_same_frames(picked.frames, [frames[4], frames[1]])
    changed = batch.with_fields(values=torch.zeros(len(batch)))
    assert changed.frames is batch.frames

    joined = TurnBatch.concat([batch, batch_of((2,), seed=1)])
    assert joined.frames_on_disk and len(joined) == 7
    assert_same_frames(joined.frames, [*frames, *batch_of((2,), seed=1).frames])


def test_spilled_batch_round_trips_through_parquet_and_png(tmp_path: Path) -> None:
    batch = batch_of((3, 2)).spill_frames(tmp_path / "store")
    batch.save(tmp_path / "saved")
    assert len(list((tmp_path / "saved" / "frames").glob("*.png"))) == 5
    in_memory = TurnBatch.load(tmp_path / "saved")
    on_disk = TurnBatch.load(tmp_path / "saved", frames_on_disk=True)
    assert isinstance(in_memory.frames, list) and on_disk.frames_on_disk
    assert_same_frames(in_memory.frames, batch.frames)
    assert_same_frames(on_disk.frames, batch.frames)
    assert torch.equal(on_disk.rewards, batch.rewards)


def test_threshold_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPILL_ENV, raising=False)
    assert spill_threshold() is None and not batch_of((3, 2)).frames_on_disk
    monkeypatch.setenv(SPILL_ENV, "5")
    assert spill_threshold() == 5
    assert not batch_of((3, 2)).frames_on_disk  # 5 frames: not more than 5
    assert batch_of((3, 3)).frames_on_disk
    monkeypatch.setenv(SPILL_ENV, "0")
    assert batch_of((1,)).frames_on_disk
    monkeypatch.setenv(SPILL_ENV, "many")
    with pytest.raises(ValueError, match=SPILL_ENV):
        spill_threshold()


def test_critic_gives_the_same_values_and_steps_from_disk(tmp_path: Path) -> None:
    settings = CriticSettings(input_height=36, input_width=36, hidden_dim=16, minibatch_size=4)
    frames = frames_for(10, shape=(40, 44, 3))
    returns = torch.linspace(0, 50, 10)
    from_list, from_disk = CriticTrainer(settings, seed=3), CriticTrainer(settings, seed=3)
    assert torch.equal(from_list.predict(frames), from_disk.predict(store_frames(frames, tmp_path)))
    list_metrics = from_list.train_step(frames, returns)
    disk_metrics = from_disk.train_step(store_frames(frames, tmp_path), returns)
    assert list_metrics["critic/loss"] == disk_metrics["critic/loss"]
    for a, b in zip(from_list.network.parameters(), from_disk.network.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_batch_built_like_the_collector_does_spills_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    """The collector's way (frames appended to a list, then ``TurnBatch(frames=...)``) gives
    an on-disk batch under ODYSSEY_FRAMES_ON_DISK, in a real process whose exit removes the
    store's folder."""
    code = (
        "import numpy as np, torch\n"
        "from odyssey_core.rollout.batch import TurnBatch\n"
        "frames = []\n"
        "for i in range(3):\n"
        "    frames.append(np.array(np.full((4, 4, 3), i), dtype=np.uint8))\n"
        "b = TurnBatch(episode_ids=torch.zeros(3, dtype=torch.long),"
        " turn_index=torch.arange(3), levels=['x'] * 3, frames=frames,"
        " prompt_ids=[torch.arange(2)] * 3, response_ids=[torch.arange(1)] * 3,"
        " thought_mask=[torch.tensor([False])] * 3, action_mask=[torch.tensor([True])] * 3,"
        " behaviour_logprobs=[torch.zeros(1)] * 3, rewards=torch.zeros(3),"
        " terminated=torch.tensor([False, False, True]), truncated=torch.zeros(3, dtype=bool))\n"
        "print(type(b.frames).__name__, b.frames.store.folder.parent, int(b.frames[2][0, 0, 0]))\n"
    )
    env = {**os.environ, SPILL_ENV: "2", "ODYSSEY_FRAMES_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["FrameView", str(tmp_path), "2"]
    assert list(tmp_path.iterdir()) == []

"""Frame sampling: the DCT pHash, uniform times, dedup and the sidecar join."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
from PIL import Image

from odyssey_core.data.sampling import (
    SamplingConfig,
    dct_phash,
    hamming,
    load_samples,
    sample_frames,
    uniform_indices,
)
from odyssey_core.data.walkthroughs import (
    ImportConfig,
    RecordConfig,
    import_video,
    record_walkthrough,
)


def _pattern(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (9, 10, 3), dtype=np.uint8)
    return np.repeat(np.repeat(small, 16, 0), 16, 1)  # 144x160, coarse structure


def test_phash_is_robust_to_noise_and_separates_images() -> None:
    image = _pattern(0)
    noisy = np.clip(
        image.astype(int) + np.random.default_rng(1).integers(-6, 7, image.shape), 0, 255
    )
    assert hamming(dct_phash(image), dct_phash(image)) == 0
    assert hamming(dct_phash(image), dct_phash(noisy.astype(np.uint8))) <= 4
    assert hamming(dct_phash(image), dct_phash(_pattern(5))) > 12
    assert 0 <= dct_phash(Image.fromarray(image)) < 2**64


def test_uniform_indices() -> None:
    assert uniform_indices(0, 10, 10, 5, 1000) == [10, 30, 50, 70, 90]
    assert uniform_indices(2, 3, 10, 100, 1000) == list(range(20, 30))  # at most every frame
    assert uniform_indices(0, 10, 10, 5, 40)[-1] <= 39  # clipped to the frames that exist
    assert uniform_indices(5, 6, 10, 3, 40) == []


def test_sample_recorded_walkthrough_joins_sidecar(tmp_path: Path) -> None:
    config = RecordConfig(agent="random", agent_kwargs={"seed": 3}, max_turns=30)
    walk = record_walkthrough(config, "1-1", tmp_path / "walk")
    samples = sample_frames(
        [walk], tmp_path / "samples", SamplingConfig(frames_per_level=8, show_progress=False)
    )
    assert 1 <= len(samples) <= 8
    assert len({s.frame_hash for s in samples}) == len(samples)
    assert [s.timestamp_s for s in samples] == sorted(s.timestamp_s for s in samples)
    for sample in samples:
        data = (tmp_path / "samples" / sample.frame).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sample.frame_hash
        assert Image.open(tmp_path / "samples" / sample.frame).size == (160, 144)
        state = json.loads(sample.state)
        assert state["frame_index"] == sample.frame_index and state["buttons_next"]
        assert sample.timestamp_s == pytest.approx(sample.frame_index / 8)
    assert load_samples(tmp_path / "samples") == samples


def test_near_duplicates_are_removed(tmp_path: Path) -> None:
    # 4 distinct scenes, each held for 10 frames: only ~4 frames should survive the dedup.
    video = tmp_path / "held.mp4"
    with imageio.get_writer(video, format="FFMPEG", fps=10, macro_block_size=1) as writer:
        for scene in range(4):
            for _ in range(10):
                writer.append_data(_pattern(scene))
    walk = import_video(
        ImportConfig(video=video, segments=[{"level": "1-1", "start_s": 0, "end_s": 4}]),
        tmp_path / "walk",
    )
    config = SamplingConfig(
        frames_per_level=20, oversample=1, phash_threshold=6, show_progress=False
    )
    samples = sample_frames([walk], tmp_path / "samples", config)
    assert len(samples) == 4
    assert all(s.state is None for s in samples)
    assert {s.frame_index // 10 for s in samples} == {0, 1, 2, 3}
    no_dedup = config.model_copy(update={"phash_threshold": -1})
    assert len(sample_frames([walk], tmp_path / "samples2", no_dedup)) > 4


def test_episodes_of_a_level_share_its_budget(tmp_path: Path) -> None:
    from odyssey_core.data.walkthroughs import record_walkthroughs

    config = RecordConfig(
        agent="random",
        agent_kwargs={"seed": 3},
        max_turns=20,
        episodes_per_level=2,
        explore_prob=0.3,
        explore_turns=2,
    )
    walks = record_walkthroughs(config, tmp_path / "walk")
    assert [w.name for w in walks] == ["odland-1-1", "odland-1-1-ep1"]
    sampling = SamplingConfig(
        frames_per_level=12, oversample=3, phash_threshold=-1, show_progress=False
    )
    samples = sample_frames(walks, tmp_path / "samples", sampling)
    # One level, so one budget split over its two videos by duration, not 12 per video.
    assert 2 <= len(samples) <= 12 and {s.level for s in samples} == {"1-1"}
    assert {s.walkthrough for s in samples} == {"odland-1-1", "odland-1-1-ep1"}
    for sample in samples:
        assert sample.state_dict()["frame_index"] == sample.frame_index


def test_share_out_water_fills() -> None:
    from odyssey_core.data.sampling import share_out

    assert share_out(10, [100, 100, 100]) == [4, 3, 3]
    assert share_out(10, [2, 100, 100]) == [2, 4, 4]  # the short bin's rest goes to the others
    assert share_out(10, [2, 3, 1]) == [2, 3, 1]  # not enough in all: everything
    assert share_out(9, [100, 100], [2.0, 1.0]) == [6, 3]
    assert share_out(5, [0, 9]) == [0, 5] and share_out(0, [3]) == [0]


def test_total_frames_go_to_levels_that_have_them(tmp_path: Path) -> None:
    walks = []
    for level, scenes in (("1-1", 2), ("1-2", 8)):
        video = tmp_path / f"{level}.mp4"
        with imageio.get_writer(video, format="FFMPEG", fps=10, macro_block_size=1) as writer:
            for scene in range(scenes):
                for _ in range(2):
                    writer.append_data(_pattern(10 * scenes + scene))
        segment = {"level": level, "start_s": 0, "end_s": scenes * 0.2}
        walks.append(
            import_video(
                ImportConfig(video=video, segments=[segment], name=level), tmp_path / "walk"
            )
        )
    config = SamplingConfig(total_frames=8, oversample=3, phash_threshold=6, show_progress=False)
    samples = sample_frames(walks, tmp_path / "samples", config)
    levels = [s.level for s in samples]
    # 1-1 holds only 2 distinct scenes, so 1-2 takes the 2 frames 1-1 could not fill.
    assert len(samples) == 8 and levels.count("1-1") == 2 and levels.count("1-2") == 6

"""Curation to an exact number of training rows (``sampling.target_train_rows``, Table 8's
5,058): the first draw topped up from the walkthroughs' other frames until the target is met,
a clear error when they run out, and a resume after a kill that asks the teacher nothing twice.

The teacher is an OpenAI-compatible HTTP server in this process that answers every fourth frame
(by image) with an unreadable answer, so the quarantine is real; the walkthroughs are odland
levels played by the search expert."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers_chat import ChatReply, ChatRequest, FakeChatServer

from odyssey_core.data.cli import CurateConfig, load_curate_config, run_annotate
from odyssey_core.data.dataset import load_dataset, read_json, read_table, split_of
from odyssey_core.data.sampling import SampledFrame, draw_order, load_reserve, load_samples
from odyssey_core.data.top_up import TargetNotReached
from odyssey_core.data.walkthroughs import RecordConfig, record_walkthroughs
from odyssey_core.protocol import format_response

REPO = Path(__file__).resolve().parents[2]


class _Teacher(FakeChatServer):
    """Answers like a VLM; the answer to every fourth image (by its hash) is unreadable.
    ``hold_at``: the n-th request is held unanswered until ``release`` (the test kills the
    client meanwhile)."""

    def __init__(self, hold_at: int | None = None) -> None:
        super().__init__()
        self.hold_at = hold_at
        self.held = threading.Event()
        self.release = threading.Event()

    def answer(self, request: ChatRequest) -> ChatReply:
        if request.number == self.hold_at:
            self.held.set()
            self.release.wait(60)
        if int(hashlib.sha256(request.image.encode()).hexdigest()[:8], 16) % 4 == 0:
            # no <answer>: quarantined
            return ChatReply(text="I think I should run to the right.")
        return ChatReply(
            text=format_response(
                "Odland's hero stands on the ground, the level runs to the right.",
                "Nothing blocks the way, so I run right.",
                ("right",),
            )
        )

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        super().__exit__(*exc)


@pytest.fixture(scope="module")
def walkthroughs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two odland levels, the expert's own line and one with detours, 30 turns each."""
    folder = tmp_path_factory.mktemp("topup") / "walkthroughs"
    config = RecordConfig(
        levels=["1-1", "1-2"],
        agent_kwargs={"max_nodes": 60},
        max_turns=30,
        episodes_per_level=2,
        clean_episodes=1,
        explore_prob=0.2,
        explore_turns=4,
    )
    record_walkthroughs(config, folder, show_progress=False)
    return folder


def _config(url: str, target: int | None, **sampling: Any) -> CurateConfig:
    return load_curate_config(
        "tiny",
        {
            "record": {"levels": ["1-1", "1-2"], "episodes_per_level": 2, "explore_prob": 0.2},
            "sampling": {
                "total_frames": 16,
                "oversample": 1.0,
                "phash_threshold": 2,
                "target_train_rows": target,
                **sampling,
            },
            "teacher": {
                "name": "openai",
                "options": {
                    "model": "local-vlm",
                    "base_url": url,
                    "api_key_env": None,
                    "concurrency": 1,
                    "timeout": 30,
                    "max_retries": 0,
                    "show_progress": False,
                },
            },
            "validation": {"max_failed_share": 0.6},
            "val_share": 0.2,
            "show_progress": False,
        },
    )


def _prepare(walkthroughs: Path, out: Path) -> Path:
    shutil.copytree(walkthroughs, out / "walkthroughs")
    return out


def _curate_after_recording(config: CurateConfig, out: Path) -> Path:
    from odyssey_core.data.cli import run_build, run_sample, run_validate

    run_sample(config, out)
    run_annotate(config, out)
    run_validate(config, out)
    return run_build(config, out)


def test_the_paper_presets_aim_at_table_8s_5058_training_rows() -> None:
    for name in ("paper", "mario"):
        config = load_curate_config(name)
        assert config.sampling.total_frames == 5000  # Section 6.1's ~5,000 frames, drawn first
        assert config.sampling.target_train_rows == 5058 and config.val_share == 0.05
    assert load_curate_config("mario").sampling.short_of_target == "error"
    assert load_curate_config("tiny").sampling.target_train_rows is None


def test_draw_order_takes_the_levels_in_turn_and_spreads_each_over_time() -> None:
    frames = [
        SampledFrame(f"{level}{i}", "", "", "odland", level, "", "", i, float(i))
        for level in ("1-1", "1-2")
        for i in range(8)
    ]
    ordered = draw_order(frames)
    assert [f.level for f in ordered[:4]] == ["1-1", "1-2", "1-1", "1-2"]
    assert [f.frame_index for f in ordered if f.level == "1-1"] == [0, 4, 2, 6, 1, 5, 3, 7]
    assert sorted(ordered, key=frames.index) == frames  # a permutation


def test_a_target_of_n_training_rows_gives_exactly_n(walkthroughs: Path, tmp_path: Path) -> None:
    with _Teacher() as teacher:
        # the first draw (16 frames) falls short of 20 training rows: topped up
        out = _prepare(walkthroughs, tmp_path / "short")
        data = load_dataset(_curate_after_recording(_config(teacher.url, 20), out))
        report = read_json(out / "annotations" / "top_up.json")
        first = {f.frame_hash for f in load_samples(out / "samples")}
        reserve = {f.frame_hash for f in load_reserve(out / "samples")}
        assert len(data.split("train")) == 20 == data.manifest["top_up"]["train_rows"]
        assert len(report["rounds"]) >= 2 and report["rounds"][0] == len(first) < 20
        assert data.manifest["num_quarantined"] == report["quarantined"] > 0
        assert len(data.split("val")) == report["val_rows"] > 0
        assert max(teacher.hits.values()) == 1  # no frame asked twice across the rounds
        assert teacher.requests == report["frames_labelled"] >= report["frames_kept"]
        assert first.isdisjoint(reserve)  # the top-up draws frames the first draw did not use
        annotated = {r["frame_hash"] for r in read_table(out / "annotations/annotations.parquet")}
        assert first < annotated <= first | reserve
        # a first draw holding more than 5 training rows is trimmed to exactly 5
        out = _prepare(walkthroughs, tmp_path / "over")
        data = load_dataset(_curate_after_recording(_config(teacher.url, 5), out))
        report = read_json(out / "annotations" / "top_up.json")
        assert len(data.split("train")) == 5 and report["rounds"] == [report["first_draw"]]
        assert report["frames_kept"] < report["first_draw"]


def test_walkthroughs_that_run_out_fail_saying_how_far_they_got_and_what_to_record(
    walkthroughs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from odyssey_core.data.cli import run_sample

    with _Teacher() as teacher:
        # more training rows than the walkthroughs' frames on the train side of the split:
        # the sample stage says so before a single request
        out = _prepare(walkthroughs, tmp_path / "early")
        with pytest.raises(TargetNotReached, match=r"fewer than the 10000 training rows"):
            run_sample(_config(teacher.url, 10_000), out)
        assert teacher.requests == 0
        frames = load_samples(out / "samples") + load_reserve(out / "samples")
        ceiling = sum(1 for f in frames if split_of(f.frame_hash, 0.2) == "train")
        # exactly as many as the train side holds: only a teacher with no failed answer gets
        # there, so this one (every fourth answer unreadable) labels every frame and stops
        config = _config(teacher.url, ceiling)
        out = _prepare(walkthroughs, tmp_path / "late")
        run_sample(config, out)
        with pytest.raises(TargetNotReached) as error:
            run_annotate(config, out)
        report = read_json(out / "annotations" / "top_up.json")
        assert report["frames_labelled"] == len(frames) == teacher.requests  # all of them
        assert 0 < report["train_rows"] < ceiling and not report["reached"]
        message = str(error.value)
        assert f"reached {report['train_rows']} of the {ceiling} training rows" in message
        assert f"{report['quarantined']} quarantined" in message
        assert "sampling.target_train_rows" in message
        assert "record more walkthroughs" in message
        assert "record.episodes_per_level (now 2)" in message
        # short_of_target: warn keeps the rows reached and says so; every answer is cached
        config = _config(teacher.url, ceiling, short_of_target="warn")
        with caplog.at_level(logging.WARNING, logger="odyssey_core.data.top_up"):
            run_annotate(config, out)
        assert f"reached {report['train_rows']} of the {ceiling}" in caplog.text
        assert teacher.requests == len(frames)
        from odyssey_core.data.cli import run_build, run_validate

        run_validate(config, out)
        data = load_dataset(run_build(config, out))
        assert len(data.split("train")) == report["train_rows"]


@pytest.mark.slow  # a curation subprocess, killed mid-round, then resumed
def test_a_resume_after_a_kill_asks_the_teacher_nothing_twice(
    walkthroughs: Path, tmp_path: Path
) -> None:
    out = _prepare(walkthroughs, tmp_path / "killed")
    with _Teacher() as teacher:
        config = _config(teacher.url, 20)
        config_file = tmp_path / "curate.yaml"
        config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        curate_cli = [sys.executable, "-m", "odyssey_core.cli", "curate"]
        common = ["--config", str(config_file), "--out", str(out)]
        subprocess.run([*curate_cli, "sample", *common], check=True, cwd=REPO)
        first = len(load_samples(out / "samples"))
        teacher.hold_at = first + 3  # the third frame of the top-up round
        annotate = subprocess.Popen(
            [*curate_cli, "annotate", *common], cwd=REPO, stdout=subprocess.DEVNULL
        )
        try:
            assert teacher.held.wait(120), "the annotate stage never reached the top-up round"
            os.kill(annotate.pid, signal.SIGKILL)
        finally:
            annotate.wait(30)
        teacher.release.set()
        answered = dict(teacher.hits)  # all answered and cached but the last, cut off
        assert annotate.returncode == -signal.SIGKILL
        assert sum(answered.values()) == first + 3
        run_annotate(config, out)  # the resume
        metrics = read_json(out / "annotations" / "teacher_metrics.json")
        again = [key for key, n in teacher.hits.items() if n > 1]
        assert len(again) == 1 and answered[again[0]] == 1  # only the one never answered
        assert metrics["cache_hits"] == first + 2
        assert metrics["requests"] == teacher.requests - (first + 3)
        from odyssey_core.data.cli import run_build, run_validate

        run_validate(config, out)
        data = load_dataset(run_build(config, out))
        assert len(data.split("train")) == 20

"""Run folders that always resume: the metrics log (a full disk while a line is written, a line
torn by a crash, an atomic rewrite), checkpoint names past step 999,999, and a re-save of a
step folder that never leaves a moment without it."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers_disk import enospc, fill, small_disk

from odyssey_core.common import files
from odyssey_core.common.metrics_log import METRICS_FILE, MetricsLog, MetricsWriteError
from odyssey_core.common.run_folder import (
    CHECKPOINTS_DIR,
    STATE_FILE,
    RunWriteError,
    checkpoint_name,
    checkpoint_step,
    latest_checkpoint,
    step_folders,
)
from odyssey_core.rl.checkpoint import load_trainer_state, save_checkpoint

PAGE = 4096


def _lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n"), "the log must end with a whole line"
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- the metrics log -----------------------------------------------------------------------------


def test_a_full_disk_while_writing_a_metrics_line_leaves_whole_lines_and_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = "x" * (3 * PAGE)  # a line that needs pages the full disk does not have
    with small_disk(tmp_path / "disk", 1) as real:
        out = tmp_path / "disk" / "run"
        log = MetricsLog(out)
        for step in (1, 2):
            log.append({"step": step, "loss": 0.5 / step})
        if real:
            filler = fill(tmp_path / "disk", leave_bytes=0)
        else:  # the first write lands half the line, the next finds the disk full
            real_write = os.write
            calls = []

            def half_then_full(fd: int, data: bytes) -> int:
                calls.append(len(data))
                if len(calls) == 1:
                    return real_write(fd, bytes(data[: len(data) // 2]))
                return enospc()

            monkeypatch.setattr("odyssey_core.common.metrics_log.os.write", half_then_full)
        with pytest.raises(MetricsWriteError) as info:
            log.append({"step": 3, "note": big})
        error = info.value
        assert isinstance(error, RunWriteError) and isinstance(error, OSError)
        assert error.errno == errno.ENOSPC and error.folder == out
        message = str(error)
        assert "the metrics line of step 3" in message and METRICS_FILE in message
        assert "disk is full" in message and "free space" in message and "resume" in message
        assert "there is no earlier complete checkpoint" in message
        # the line that did not fit is cut back off: what is left are whole lines
        assert _lines(log.path) == [{"loss": 0.5, "step": 1}, {"loss": 0.25, "step": 2}]

        if real:
            filler.unlink()
        else:
            monkeypatch.undo()
        resumed = MetricsLog(out)
        resumed.keep_through(2)
        resumed.append({"step": 3, "loss": 0.1})
        assert [r["step"] for r in _lines(log.path)] == [1, 2, 3]


def test_a_torn_last_line_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.append({"step": step, "loss": float(step)})
    with open(log.path, "a") as handle:  # what a crash mid-write leaves
        handle.write('{"loss": 4.0, "st')
    with caplog.at_level(logging.WARNING, logger="odyssey_core.common.metrics_log"):
        MetricsLog(tmp_path).keep_through(2)
    assert [r["step"] for r in _lines(log.path)] == [1, 2]
    warnings = [r.getMessage() for r in caplog.records]
    assert any("cut off" in w and str(log.path) in w for w in warnings), warnings

    # appended to without a resume first: the torn tail goes before the new line
    with open(log.path, "a") as handle:
        handle.write('{"step": 3, "lo')
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="odyssey_core.common.metrics_log"):
        MetricsLog(tmp_path).append({"step": 3, "loss": 3.0})
    assert [r["step"] for r in _lines(log.path)] == [1, 2, 3]
    assert any("cut off" in r.getMessage() for r in caplog.records)
    assert [r["step"] for r in MetricsLog(tmp_path).records()] == [1, 2, 3]


def test_a_line_that_is_not_json_is_dropped_not_raised(tmp_path: Path) -> None:
    (tmp_path / METRICS_FILE).write_text('{"step": 1}\n{"step": 2, "lo{"step": 3}\n[1]\n')
    log = MetricsLog(tmp_path)
    assert log.records() == [{"step": 1}]
    log.keep_through(5)
    assert _lines(log.path) == [{"step": 1}]


def test_the_rewrite_on_resume_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.append({"step": step})
    before = log.path.read_bytes()
    monkeypatch.setattr(files.os, "replace", enospc)  # the rename that publishes the rewrite
    with pytest.raises(MetricsWriteError, match="disk is full"):
        log.keep_through(1)
    assert log.path.read_bytes() == before  # the old log, whole
    assert [p.name for p in tmp_path.iterdir()] == [METRICS_FILE]  # no temporary left
    monkeypatch.undo()
    log.keep_through(1)
    assert _lines(log.path) == [{"step": 1}]


# -- checkpoint names ----------------------------------------------------------------------------


def _complete(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / STATE_FILE).write_bytes(b"")
    return folder


def test_checkpoint_names_sort_past_step_999999_old_names_included(tmp_path: Path) -> None:
    assert checkpoint_name(999_999) < checkpoint_name(1_000_000) < checkpoint_name(10**8)
    assert checkpoint_step(checkpoint_name(1_000_000)) == 1_000_000
    assert checkpoint_step("step-000042") == 42 and checkpoint_step("step-x") is None

    root = tmp_path / CHECKPOINTS_DIR
    # six-digit names of an older run, and the seventh digit they grew past 999,999
    for name in ("step-000002", "step-999999", "step-1000000"):
        _complete(root, name)
    (root / "latest").write_text("step-999999\n")  # a crash before the pointer moved
    assert latest_checkpoint(tmp_path).name == "step-1000000"
    _complete(root, checkpoint_name(1_000_001))
    assert latest_checkpoint(tmp_path).name == checkpoint_name(1_000_001)
    assert [checkpoint_step(p.name) for p in step_folders(root)] == [2, 999_999, 10**6, 10**6 + 1]
    (root / "latest").write_text(checkpoint_name(1_000_001) + "\n")
    assert latest_checkpoint(tmp_path).name == checkpoint_name(1_000_001)


# -- re-saving a step ----------------------------------------------------------------------------


class _Model:
    def __init__(self, version: int) -> None:
        self.version = version

    def save_pretrained(self, folder: Path, safe_serialization: bool = True) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "weights.txt").write_text(str(self.version))


class _Processor:
    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "processor.json").write_text("{}")


class _Killed(BaseException):
    """Stands for the process dying right before one file-system operation."""


def _save(out: Path, version: int) -> Path:
    return save_checkpoint(
        out,
        1,
        model=_Model(version),
        processor=_Processor(),
        trainer_state={"step": 1, "version": torch.tensor(version)},
        config={"version": version},
    )


def test_a_resave_of_a_step_never_leaves_a_moment_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill the re-save of step 1 before each of its renames and removals in turn: step 1 is
    there every time, complete, as the old version or the new one."""
    operations = {
        (os, "rename"): os.rename,
        (os, "replace"): os.replace,
        (shutil, "rmtree"): shutil.rmtree,
        (files, "exchange_paths"): files.exchange_paths,
    }
    kill_at = {"n": -1, "seen": 0}

    def spy(original):
        def operation(*args, **kwargs):
            if str(args[0]).startswith(str(tmp_path)):
                kill_at["seen"] += 1
                if kill_at["seen"] == kill_at["n"]:
                    raise _Killed
            return original(*args, **kwargs)

        return operation

    for (module, name), original in operations.items():
        monkeypatch.setattr(module, name, spy(original))

    versions = set()
    for n in range(1, 50):
        out = tmp_path / f"run-{n}"
        kill_at.update(n=-1)
        _save(out, 1)
        kill_at.update(n=n, seen=0)
        try:
            _save(out, 2)
            finished = True
        except _Killed:
            finished = False
        kill_at.update(n=-1)
        checkpoint = latest_checkpoint(out)
        assert checkpoint is not None and checkpoint.name == checkpoint_name(1), n
        version = int(load_trainer_state(checkpoint)["version"])
        assert (checkpoint / "policy" / "weights.txt").read_text() == str(version)
        assert json.loads((checkpoint / "config.json").read_text()) == {"version": version}
        versions.add(version)
        if finished:
            assert version == 2
            break
    else:
        raise AssertionError("the re-save never finished")
    assert versions == {1, 2}  # some kills landed before the swap, and the last run after it


# -- publishing renames --------------------------------------------------------------------------


@pytest.mark.parametrize("can_swap", [True, False])
def test_replace_folder_swaps_a_folder_in_over_a_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, can_swap: bool
) -> None:
    if not can_swap:  # a filesystem without RENAME_EXCHANGE: old aside, new in, old deleted
        monkeypatch.setattr(files, "exchange_paths", lambda a, b: False)
    final = tmp_path / "model"
    (final / "sub").mkdir(parents=True)
    (final / "sub" / "old.txt").write_text("old")
    staged = tmp_path / ".model.partial"
    staged.mkdir()
    (staged / "new.txt").write_text("new")
    files.replace_folder(staged, final)
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing left beside it


def test_a_published_file_is_synced_before_its_rename_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"
        events.append(f"fsync {kind}")
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    files.atomic_write(tmp_path / "latest", "step-000000001\n")
    assert events == ["fsync file", "rename", "fsync folder"]
    assert (tmp_path / "latest").read_text() == "step-000000001\n"

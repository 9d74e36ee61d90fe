"""An RL run whose metrics log meets a full disk, then a line torn by a crash, and resumes both
times (a size-limited tmpfs when this process may mount one, else an injected ENOSPC)."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import model_fixtures
import pytest
from helpers_disk import enospc, fill, small_disk
from helpers_presets import odysseus_preset

from odyssey_core.common.metrics_log import METRICS_FILE, MetricsWriteError
from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.checkpoint import checkpoint_name, latest_checkpoint

tiny_model_dir = model_fixtures.tiny_model_dir
PAGE = 4096


def _steps(path: Path) -> list[int]:
    text = path.read_text()
    assert text.endswith("\n"), "the log must end with a whole line"
    return [json.loads(line)["step"] for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_full_disk_on_a_metrics_line_then_a_torn_line_both_resume(
    tmp_path: Path,
    tiny_model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    preset = load_train_settings(
        odysseus_preset(tmp_path, tiny_model_dir, steps=2, checkpoint_every=1)
    )
    disk = tmp_path / "disk"
    with small_disk(disk, 64) as real:
        out = disk / "run"
        trainer = build_trainer(preset, out)
        trainer.train(steps=1)
        first = latest_checkpoint(out)
        assert first is not None and first.name == checkpoint_name(1)
        log = out / METRICS_FILE
        if real:
            # Blank lines (skipped by every reader) leave 100 bytes free in the log's last
            # page: the next line starts there and finds no page for the rest of it.
            with open(log, "a") as handle:
                handle.write("\n" * (-(log.stat().st_size + 100) % PAGE))
            filler = fill(disk, leave_bytes=0)
        else:  # the first write of the step-2 line lands 100 bytes, the next one fails
            real_write, real_open = os.write, os.open
            state = {"fd": -1, "wrote": False}

            def tracking_open(path, *args, **kwargs):
                fd = real_open(path, *args, **kwargs)
                if str(path) == str(log):
                    state.update(fd=fd, wrote=False)
                return fd

            def torn(fd: int, data: bytes) -> int:
                if fd != state["fd"]:
                    return real_write(fd, data)
                if state["wrote"]:
                    return enospc()
                state["wrote"] = True
                return real_write(fd, bytes(data[:100]))

            monkeypatch.setattr("odyssey_core.common.metrics_log.os.open", tracking_open)
            monkeypatch.setattr("odyssey_core.common.metrics_log.os.write", torn)

        with pytest.raises(MetricsWriteError) as info:
            trainer.train()
        trainer.close()
        message = str(info.value)
        assert info.value.errno == errno.ENOSPC
        assert "the metrics line of step 2" in message and str(log.parent) in message
        assert "disk is full" in message and "resume" in message and str(first) in message
        assert _steps(log) == [1]  # the part of the step-2 line that fitted is cut back off

        if real:
            filler.unlink()
        else:
            monkeypatch.undo()
        resumed = build_trainer(preset, out, resume=True)
        assert resumed.step == 1
        resumed.train()
        resumed.close()
        assert latest_checkpoint(out).name == checkpoint_name(2)
        assert _steps(log) == [1, 2]

        # a crash (or an older writer) tore the next line: resume drops it with a warning
        with open(log, "a") as handle:
            handle.write('{"loss": 0.25, "step": 3, "task/succ')
        with caplog.at_level(logging.WARNING, logger="odyssey_core.common.metrics_log"):
            again = build_trainer(preset, out, resume=True)
        again.close()
        assert again.step == 2 and _steps(log) == [1, 2]
        assert any("cut off" in record.getMessage() for record in caplog.records)

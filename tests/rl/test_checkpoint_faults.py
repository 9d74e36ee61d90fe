"""Faults while writing: a real SIGKILL in the middle of a checkpoint write, and a full disk
during a checkpoint and during an artifact upload (a size-limited tmpfs when this process may
mount one, else writes that fail with ENOSPC at the file-write boundary)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import model_fixtures
import pytest
import torch
from helpers_disk import enospc, fill, small_disk
from safetensors.torch import load_file

from odyssey_core.rl.checkpoint import (
    CheckpointWriteError,
    checkpoint_name,
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
)

tiny_model_dir = model_fixtures.tiny_model_dir

REPO = Path(__file__).resolve().parents[2]
KILLS = 12

# A writer that checkpoints in a loop, continuing from the latest complete checkpoint (its
# "resume"). Every checkpoint is ~24 MB (a 16 MB "model", 8 MB of trainer state), so a write
# takes long enough for most kills to land inside one. Every value is the step number, so a
# reader can tell a torn checkpoint from a complete one.
WRITER = r"""
import shutil, sys, torch
from pathlib import Path
from safetensors.torch import save_file
from odyssey_core.rl.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint

out = Path(sys.argv[1])

class Model:
    def __init__(self, step): self.step = step
    def save_pretrained(self, folder, safe_serialization=True):
        Path(folder).mkdir(parents=True, exist_ok=True)
        weights = {"w": torch.full((4_000_000,), float(self.step))}
        save_file(weights, str(Path(folder) / "model.safetensors"))

class Processor:
    def save_pretrained(self, folder):
        (Path(folder) / "processor.json").write_text("{}")

latest = latest_checkpoint(out)
step = 0 if latest is None else load_trainer_state(latest)["step"]
Path(sys.argv[2]).write_text(f"resumed {step}\n")
for _ in range(200):  # bounded, and only the two newest checkpoints are kept
    step += 1
    state = {"step": step, "optimizer": torch.full((2_000_000,), float(step))}
    save_checkpoint(out, step, model=Model(step), processor=Processor(), trainer_state=state,
                    config={"step": step})
    for old in sorted((out / "checkpoints").glob("step-*"))[:-2]:
        shutil.rmtree(old)
"""


def _check_complete(checkpoint: Path) -> int:
    state = load_trainer_state(checkpoint)
    step = state["step"]
    assert checkpoint.name == checkpoint_name(step)
    assert torch.equal(state["optimizer"], torch.full((2_000_000,), float(step)))
    weights = load_file(str(checkpoint / "policy" / "model.safetensors"))["w"]
    assert torch.equal(weights, torch.full((4_000_000,), float(step)))
    assert json.loads((checkpoint / "config.json").read_text()) == {"step": step}
    return step


@pytest.mark.slow
def test_sigkill_while_writing_checkpoints_leaves_latest_complete(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rng = random.Random(16)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    previous, mid_write = 0, 0
    for _ in range(KILLS):
        marker = tmp_path / "resumed.txt"
        marker.unlink(missing_ok=True)
        with open(tmp_path / "writer.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(out), str(marker)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while not marker.is_file():  # the writer imported torch and found its resume point
                assert proc.poll() is None, (tmp_path / "writer.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the writer did not start"
                time.sleep(0.01)
            time.sleep(0.05)
            assert marker.read_text().split() == ["resumed", str(previous)]
            time.sleep(rng.uniform(0.0, 0.6))
            assert proc.poll() is None, (tmp_path / "writer.log").read_text()[-2000:]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            proc.kill()
            proc.wait()
        root = out / "checkpoints"
        mid_write += any(root.glob(".tmp-*"))
        latest = latest_checkpoint(out)
        if latest is None:  # killed during its very first write
            assert previous == 0
            continue
        step = _check_complete(latest)
        assert step >= previous
        previous = step
    # the kills really landed inside writes, and the runs made progress across them
    assert mid_write >= KILLS // 3, mid_write
    assert previous >= KILLS // 2, previous


# -- a full disk ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_full_disk_during_a_checkpoint_stops_clearly_and_resumes(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers_presets import odysseus_preset

    from odyssey_core.recipes.odysseus.settings import load_train_settings
    from odyssey_core.recipes.odysseus.train import build_trainer

    preset = odysseus_preset(tmp_path, tiny_model_dir, steps=2, checkpoint_every=1)
    disk = tmp_path / "disk"
    with small_disk(disk, 64) as real:
        out = disk / "run"
        trainer = build_trainer(load_train_settings(preset), out)
        trainer.train(steps=1)
        first = latest_checkpoint(out)
        assert first is not None and first.name == checkpoint_name(1)
        before = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
        if real:  # leave room for a metrics line, not for a checkpoint
            filler = fill(disk, leave_bytes=64 * 1024)
        else:
            monkeypatch.setattr("odyssey_core.rl.checkpoint.torch.save", enospc)
        with pytest.raises(CheckpointWriteError) as info:
            trainer.train()
        trainer.close()
        error = info.value
        message = str(error)
        assert error.errno == errno.ENOSPC
        assert str(out / "checkpoints") in message and "disk is full" in message
        assert "free space" in message and "resume" in message and str(first) in message
        # the previous checkpoint is untouched and still the latest; nothing half-written
        assert latest_checkpoint(out) == first
        assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == before
        assert not list((out / "checkpoints").glob(".tmp-*"))
        assert not (out / "checkpoints" / checkpoint_name(2)).exists()

        if real:
            filler.unlink()
        else:
            monkeypatch.undo()
        resumed = build_trainer(load_train_settings(preset), out, resume=True)
        assert resumed.step == 1
        resumed.train()
        resumed.close()
        assert latest_checkpoint(out).name == checkpoint_name(2)
        assert load_trainer_state(latest_checkpoint(out))["step"] == 2


def test_full_disk_mid_checkpoint_keeps_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same contract without a trainer: a write that fails part-way through the folder."""

    class Model:
        def save_pretrained(self, folder, safe_serialization=True):
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / "model.bin").write_bytes(b"\1" * 2_000_000)

    class Processor:
        def save_pretrained(self, folder):
            (Path(folder) / "processor.json").write_text("{}")

    with small_disk(tmp_path / "disk", 8) as real:
        out = tmp_path / "disk" / "run"
        first = save_checkpoint(
            out, 1, model=Model(), processor=Processor(), trainer_state={"step": 1}, config={}
        )
        if real:
            filler = fill(tmp_path / "disk", leave_bytes=256 * 1024)
        else:
            monkeypatch.setattr("odyssey_core.rl.checkpoint.torch.save", enospc)
        with pytest.raises(CheckpointWriteError, match="disk is full") as info:
            save_checkpoint(
                out, 2, model=Model(), processor=Processor(), trainer_state={"step": 2}, config={}
            )
        assert info.value.errno == errno.ENOSPC and str(first) in str(info.value)
        assert latest_checkpoint(out) == first and load_trainer_state(first) == {"step": 1}
        assert not list((out / "checkpoints").glob(".tmp-*"))
        if real:
            filler.unlink()
        else:
            monkeypatch.undo()
        second = save_checkpoint(
            out, 2, model=Model(), processor=Processor(), trainer_state={"step": 2}, config={}
        )
        assert latest_checkpoint(out) == second


def test_full_disk_during_an_artifact_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from odyssey_core.registry.artifacts import (
        ArtifactError,
        ArtifactWriteError,
        LocalArtifactStore,
    )

    def folder(name: str, size: int, fill: bytes) -> Path:
        path = tmp_path / "src" / name
        path.mkdir(parents=True)
        (path / "weights.bin").write_bytes(fill * size)
        (path / "config.json").write_text(json.dumps({"name": name}))
        return path

    small = folder("small", 100_000, b"a")
    big = folder("big", 3_000_000, b"b")
    big_file = tmp_path / "src" / "big.bin"
    big_file.write_bytes(b"c" * 3_000_000)

    with small_disk(tmp_path / "disk", 8) as real:
        store = LocalArtifactStore(tmp_path / "disk" / "store")
        published = store.put_dir(small, "models/small")
        if real:
            filler = fill(tmp_path / "disk", leave_bytes=512 * 1024)
        else:
            monkeypatch.setattr(LocalArtifactStore, "_upload", enospc)

        with pytest.raises(ArtifactWriteError) as info:
            store.put_dir(big, "models/big")
        assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
        message = str(info.value)
        assert store.uri_for("models/big") in message and "full" in message
        assert "Nothing was published" in message and "free space" in message
        with pytest.raises(ArtifactWriteError, match=r"big\.bin"):
            store.put_file(big_file, "files/big.bin")
        # republishing an existing key with a bigger version fails before touching the old one
        with pytest.raises(ArtifactWriteError):
            store.put_dir(big, "models/small")

        assert not store.exists("files/big.bin")
        assert not store.list("models/big")
        with pytest.raises(ArtifactError):
            store.get_dir("models/big", tmp_path / "fetched-big")
        store.get_dir(published, tmp_path / "fetched-small")  # checksums verified
        assert (tmp_path / "fetched-small" / "weights.bin").read_bytes() == b"a" * 100_000
        leftovers = [p for p in (store.root / ".tmp").rglob("*") if p.is_file()]
        assert not leftovers, leftovers

        if real:
            filler.unlink()
        else:
            monkeypatch.undo()
        store.put_dir(big, "models/big")
        store.get_dir("models/big", tmp_path / "fetched-big")
        assert (tmp_path / "fetched-big" / "weights.bin").read_bytes() == b"b" * 3_000_000

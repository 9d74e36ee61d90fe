"""The tiny base model is built beside its folder and renamed in when complete: a build killed
part-way (SIGKILL by PID), or an older in-place one that has ``config.json`` but not the rest,
is built again, never trusted because ``config.json`` is there."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import model_fixtures
import pytest

from odyssey_core.models.loading import load_model, load_processor
from odyssey_core.models.tiny import BUILD_MARKER, ensure_tiny_model, tiny_model_built
from odyssey_core.rl.policy import BASE_MODEL_DIR, resolve_base_model
from odyssey_core.rl.settings import ModelSettings

tiny_model_dir = model_fixtures.tiny_model_dir
REPO = Path(__file__).resolve().parents[2]

BUILDER = r"""
import sys
from pathlib import Path
from odyssey_core.rl.policy import resolve_base_model
from odyssey_core.rl.settings import ModelSettings
resolve_base_model(ModelSettings(path=None), Path(sys.argv[1]))
"""


def _loads(folder: Path) -> None:
    model = load_model(folder)
    processor = load_processor(folder)
    assert model.config.model_type == "qwen3_vl" and processor.tokenizer is not None


@pytest.mark.slow
def test_a_build_killed_part_way_is_built_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILDER, str(run)],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:  # kill it as soon as the first file of the model is written, wherever that is
        deadline = time.monotonic() + 180
        while not (run.exists() and any(run.rglob("config.json"))):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the build wrote no config.json in time"
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    base = run / BASE_MODEL_DIR
    assert not tiny_model_built(base)  # killed mid-build: nothing complete under the name

    resolved = resolve_base_model(ModelSettings(path=None), run)  # what --resume does
    assert resolved == base and tiny_model_built(base, 0, zero_mean_patches=False)
    _loads(base)
    # the killed build's temporary folder is gone, nothing else is left beside the model
    assert sorted(p.name for p in run.iterdir()) == [BASE_MODEL_DIR]


def test_an_in_place_partial_folder_is_rebuilt_a_complete_one_kept(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    run = tmp_path / "run"
    base = run / BASE_MODEL_DIR
    base.mkdir(parents=True)
    # what an older in-place build leaves when killed after save_pretrained began
    shutil.copy(tiny_model_dir / "config.json", base / "config.json")
    weights = (tiny_model_dir / "model.safetensors").read_bytes()
    (base / "model.safetensors").write_bytes(weights[:999])

    assert resolve_base_model(ModelSettings(path=None), run) == base
    assert tiny_model_built(base, 0)
    _loads(base)

    marker = (base / BUILD_MARKER).stat()
    assert ensure_tiny_model(base, 0) == base  # complete and built with these arguments: kept
    assert (base / BUILD_MARKER).stat().st_ino == marker.st_ino
    assert not tiny_model_built(base, 1)  # another seed would be built again


def test_a_folder_of_other_files_is_never_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a tiny model"):
        ensure_tiny_model(folder)
    assert (folder / "notes.txt").read_text() == "keep me"

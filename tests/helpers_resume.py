"""What a kill-and-resume test needs: a training process SIGKILLed while its second step runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from odyssey_core.common.run_folder import checkpoint_name

REPO = Path(__file__).resolve().parent.parent


def kill_during_step_two(code: str, out_dir: Path, *args: object, timeout_s: float = 180) -> None:
    """Run ``python -c code args...`` (a training run writing checkpoints under ``out_dir``) and
    SIGKILL it as soon as the step-1 checkpoint is complete, i.e. while step 2 runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    pointer = out_dir / "checkpoints" / "latest"
    try:
        deadline = time.monotonic() + timeout_s
        while not (pointer.is_file() and pointer.read_text().strip() == checkpoint_name(1)):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no step-1 checkpoint in time"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not (out_dir / "checkpoints" / checkpoint_name(2)).exists(), "killed too late"

"""What a DeepSpeed test needs to start a world-size-1 process group (gloo) in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def single_process_dist_env() -> dict[str, str]:
    """This process's environment plus rank 0 of a one-process world on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }


def run_in_single_process_world(script: str, *args: object) -> dict[str, Any]:
    """Run ``python -c script args...`` as rank 0 of a one-process world (so the process group
    does not outlive the test) and return the JSON object its last stdout line prints."""
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=REPO,
        env=single_process_dist_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

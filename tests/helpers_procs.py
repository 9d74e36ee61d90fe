"""Start a command-line server of the stack (mlflow server, mlflow models serve) for a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def mlflow_process(args: list[str], log: Path, **env: str) -> subprocess.Popen:
    """``mlflow <args>`` from this venv in its own session (stop it by PID), its output in
    ``log``, with ``env`` over this process's environment; uvicorn is found on PATH."""
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    path = f"{mlflow_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    with log.open("wb") as out:  # the child keeps its own copy of the file
        return subprocess.Popen(
            [str(mlflow_bin), *args],
            env={**os.environ, "PATH": path, "MLFLOW_DISABLE_TELEMETRY": "true", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

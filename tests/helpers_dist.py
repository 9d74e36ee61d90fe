"""What a DeepSpeed test needs to start a world-size-1 process group (gloo) in a subprocess."""

from __future__ import annotations

import os
import socket


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

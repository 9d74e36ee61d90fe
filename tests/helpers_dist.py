"""What the distributed tests need: a world-size-1 process group (gloo) in a subprocess, two
CPU ranks under torchrun, the pid of one rank of a launch, and the parts that let a one-rank
trainer train on exactly the union of a two-rank step."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from odyssey_core.rl.distributed import World, rank_seed
from odyssey_core.rl.trainer import rank_budget
from odyssey_core.rollout.batch import TurnBatch

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


# -- two ranks under torchrun ------------------------------------------------------------------


def torchrun_command(script: Path, *args: object, nproc: int = 2) -> list[str]:
    """``torchrun --standalone --nproc_per_node nproc script args...`` with this venv's python
    (``--tee 3``: every worker line prefixed with its local rank)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc),
        "--max_restarts",
        "0",
        "--tee",
        "3",
        str(script),
        *map(str, args),
    ]


def run_on_ranks(
    script: str, folder: Path, *args: object, nproc: int = 2, timeout: float = 300
) -> list[dict[str, Any]]:
    """Run ``script`` (Python source; its arguments are ``folder`` then ``args``) on ``nproc``
    CPU ranks under torchrun; each rank writes ``folder/rank-<r>.json``, which come back in
    rank order. A failed rank fails the test with the launcher's output."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.py"
    path.write_text(script)
    done = subprocess.run(
        torchrun_command(path, folder, *args, nproc=nproc),
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(nproc)]


def rank_pid(out_dir: Path, rank: int) -> int | None:
    """The pid of the training process of ``rank`` whose command line names ``out_dir`` (a
    worker of a launch this test started), or None while there is none."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        ours = str(out_dir).encode() in cmdline and f"RANK={rank}".encode() in environ
        if ours and b"torch.distributed.run" not in cmdline:  # the worker, not the launcher
            return int(proc.name)
    return None


class UnionCollector:
    """Collects, in one process, exactly what ``ranks`` ranks collect in one step (each rank's
    share of the budget, its starts, its seed, one after the other) and joins the batches: a
    one-rank trainer on it trains on the union of a multi-rank step's trajectories."""

    def __init__(self, collector: Any, ranks: int) -> None:
        self.collector, self.ranks = collector, ranks
        self.vector_env = collector.vector_env

    def collect(self, budget: Any, *, seed: int, starts: Any = None) -> tuple[Any, Any]:
        parts = []
        for rank in range(self.ranks):
            share, mine = rank_budget(budget, starts, World(rank, self.ranks, rank))
            parts.append(self.collector.collect(share, seed=rank_seed(seed, rank), starts=mine))
        return TurnBatch.concat([batch for batch, _ in parts]), parts[0][1]


class StepRecorder:
    """A trainer hook that keeps, per step, this rank's env seeds, responses and turn count
    (``on_batch``) and the advantages of every rank's turns (``on_step_end``), and saves the
    policy weights after each step as ``folder/weights-<step>-rank<r>.pt``."""

    name = "record"

    def __init__(self, folder: Path, rank: int) -> None:
        self.folder, self.rank = Path(folder), rank
        self.steps: list[dict[str, Any]] = []
        self.current: dict[str, Any] = {}

    def episode_starts(self, trainer: Any) -> None:
        return None

    def on_batch(self, trainer: Any, batch: Any) -> dict[str, float]:
        self.current = {
            "env_seeds": sorted({int(e["env_seed"]) for e in batch.extras}),
            "responses": [e["response"] for e in batch.extras],
            "turns": len(batch),
        }
        return {}

    def extra_losses(self, trainer: Any) -> list[Any]:
        return []

    def on_step_end(self, trainer: Any, batch: Any) -> dict[str, float]:
        self.current["union_advantages"] = batch.advantages.tolist()
        path = self.folder / f"weights-{trainer.step + 1}-rank{self.rank}.pt"
        torch.save(trainer.policy.model.state_dict(), path)
        self.steps.append(self.current)
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def run_alone(script: str, folder: Path, *args: object, timeout: float = 300) -> dict[str, Any]:
    """Run ``script`` (arguments: ``folder`` then ``args``) as a plain process that no launcher
    started (none of the launchers' variables set) and return its ``folder/rank-0.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.py"
    path.write_text(script)
    launcher_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in launcher_vars}
    done = subprocess.run(
        [sys.executable, str(path), str(folder), *map(str, args)],
        cwd=REPO,
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return json.loads((folder / "rank-0.json").read_text())

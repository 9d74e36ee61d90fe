"""One RL step on one rank vs two ranks (torchrun, gloo, CPU): a benchmark, not a test.

The same tiny Odysseus run (``configs/odysseus/tiny.yaml``: 4 trajectories per step, the
ppo_critic_pos estimator; invalid answers play a random button and no turn is skipped, so the
actor really updates even where the untrained model earns nothing) is launched with
``--nproc_per_node 1`` and ``2``, one torch thread per rank, ``--repeats`` times each,
alternating, so machine noise hits both alike. Each launch trains ``--steps`` steps; the first
is left out (model load, warm-up). Reported: the median step time of rank 0 (``time/step_s`` in
metrics.jsonl), the step's parts (rollout, old log-probs, update), and the wall time of the
whole launch, with the ratios two / one.

On this 2-core machine two ranks compete for the same cores as the envs and the model, so the
ratio says what rank-splitting costs or saves here, not what 8 GPUs do.

    .venv/bin/python bench/rank_step.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("time/step_s", "time/rollout_s", "time/old_logprob_s", "time/actor_update_s")


def launch(nproc: int, out: Path, steps: int, preset: str) -> tuple[float, list[dict]]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
        "--nproc_per_node", str(nproc), "--max_restarts", "0",
        "-m", "odyssey_core.cli", "train", "--recipe", "odysseus", "--preset", preset,
        "--out", str(out), "--steps", str(steps), "--threads", "1",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{nproc} rank(s) failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return wall, [json.loads(line) for line in lines if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--preset", default=str(REPO / "configs/odysseus/tiny.yaml"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rank-step-"))
    preset = work / "preset.yaml"
    preset.write_text(
        f"inherit: {args.preset}\nenv: {{invalid_action: random}}\n"
        "ppo: {skip_zero_advantage: false}\n"
    )
    walls: dict[int, list[float]] = {1: [], 2: []}
    parts: dict[int, dict[str, list[float]]] = {1: {}, 2: {}}
    for repeat in range(args.repeats):
        for nproc in (1, 2) if repeat % 2 == 0 else (2, 1):
            wall, records = launch(nproc, work / f"{nproc}-{repeat}", args.steps, str(preset))
            walls[nproc].append(wall)
            for record in records[1:]:  # the first step loads and warms up
                for key in PARTS:
                    parts[nproc].setdefault(key, []).append(float(record.get(key, 0.0)))
            print(f"repeat {repeat}, {nproc} rank(s): {wall:.1f} s", flush=True)
    print(f"\n{args.repeats} launches each, {args.steps} steps, steps 2.. counted\n")
    print("| measure | 1 rank | 2 ranks | 2 / 1 |")
    print("|---|---|---|---|")
    for key in PARTS:
        one, two = statistics.median(parts[1][key]), statistics.median(parts[2][key])
        ratio = f"{two / one:.2f}x" if one > 0 else "-"
        print(f"| median {key} | {one:.3f} s | {two:.3f} s | {ratio} |")
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"| median launch wall | {one:.1f} s | {two:.1f} s | {two / one:.2f}x |")


if __name__ == "__main__":
    main()

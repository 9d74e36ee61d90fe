"""Peak host memory of one RL step as trajectories x turns grow, frames in memory vs on disk.

Each configuration runs in its own Python process, which builds the tiny Qwen3-VL policy, the
CNN critic and plain AdamW, then runs one real ``Trainer.train_step`` (critic values, the
``ppo_critic`` advantages, the critic's fit, old log-probs, one PPO epoch). The rollout is a
stand-in that yields ``trajectories x turns`` turns with random frames (all the same size),
writing each frame as it arrives, either into a list (``memory``) or into a
:class:`~odyssey_core.rollout.frames.FrameStore` (``disk``), the way a collector that streams
its frames would; playing real envs with real generation would take far longer and measure the
same thing. Peak memory is the process's peak resident set (``VmHWM`` in
``/proc/self/status``), reset just before the step (``/proc/self/clear_refs``), so what is
reported is what the step itself adds on top of the loaded model.

A warm-up step on two turns comes first, so one-off allocations (autograd, optimiser state,
kernels' buffers) are not counted as the batch's. Sizes grow 1x, 4x, 16x (trajectories and
turns both doubling); both modes run side by side in one invocation and the ratios are
printed at the end. Linux only (``/proc``).

    python bench/memory_rl_step.py                      # 4x16, 8x32, 16x64 turns; ~3 minutes
    python bench/memory_rl_step.py --base-trajectories 8 --base-turns 32 --frame 432x480
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCALES = (1, 4, 16)
MODES = ("memory", "disk")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


class SyntheticRollout:
    """A collector stand-in: ``trajectories`` episodes of ``turns`` turns each, every turn
    with a fresh random frame, one encoded prompt and a short answer."""

    def __init__(self, policy: Any, args: argparse.Namespace, frames_dir: Path) -> None:
        import numpy as np

        from odyssey_core.envs.base import Observation

        self.args, self.frames_dir = args, frames_dir
        self.size = (args.trajectories, args.turns)
        self.height, self.width = args.frame_shape
        self.rng = np.random.default_rng(0)
        inputs, _ = policy.encode([Observation(image=self._frame(), text="Level 1-1, turn 3.")])
        self.prompt = inputs["input_ids"][0][inputs["attention_mask"][0].bool()].tolist()
        self.response = policy.tokenizer(
            "<perception>flat ground</perception><reasoning>go right</reasoning>"
            "<answer>right</answer>",
            add_special_tokens=False,
        )["input_ids"]

    def _frame(self) -> Any:
        import numpy as np

        return self.rng.integers(0, 256, (self.height, self.width, 3), dtype=np.uint8)

    def collect(self, budget: Any, *, seed: int = 0, starts: Any = None) -> tuple[Any, Any]:
        import torch

        from odyssey_core.rollout.batch import TurnBatch
        from odyssey_core.rollout.frames import FrameStore
        from odyssey_core.rollout.metrics import RolloutMetrics

        a = self.args
        trajectories, turns = self.size
        n = trajectories * turns
        store = FrameStore(self.frames_dir) if a.mode == "disk" else None
        frames: list[Any] = []
        for _ in range(n):  # written as they arrive: the list, or the store
            frame = self._frame()
            if store is None:
                frames.append(frame)
            else:
                store.append(frame)
        k = len(self.response)
        batch = TurnBatch(
            episode_ids=torch.arange(trajectories).repeat_interleave(turns),
            turn_index=torch.arange(turns).repeat(trajectories),
            levels=["odland-1-1"] * n,
            frames=frames if store is None else store.view(),
            prompt_ids=[torch.tensor(self.prompt)] * n,
            response_ids=[torch.tensor(self.response)] * n,
            thought_mask=[torch.arange(k) < k - 4] * n,
            action_mask=[torch.arange(k) >= k - 4] * n,
            behaviour_logprobs=[torch.full((k,), -1.0)] * n,
            rewards=torch.from_numpy(self.rng.uniform(0, 1, n)).float(),
            terminated=(torch.arange(n) % turns) == turns - 1,
            truncated=torch.zeros(n, dtype=torch.bool),
        )
        return batch, RolloutMetrics.from_batch(batch, {"total_s": 0.0})


def child(args: argparse.Namespace) -> None:
    """One configuration: set up, reset the peak, one train step, report."""
    import torch

    torch.set_num_threads(1)
    from odyssey_core.rl.advantages import AdvantageSettings
    from odyssey_core.rl.objectives import ObjectiveSettings
    from odyssey_core.rl.policy import build_policy
    from odyssey_core.rl.settings import CriticSettings, ModelSettings
    from odyssey_core.rl.trainer import Trainer, TrainerConfig
    from odyssey_core.rl.updater import UpdaterSettings, build_updater
    from odyssey_core.rl.value_functions import CNNValue
    from odyssey_core.rollout.collector import EpisodeBudget

    out = Path(args.out)
    policy = build_policy(ModelSettings(path=Path(args.model)), None, out)
    rollout = SyntheticRollout(policy, args, out / "frames")
    config = TrainerConfig(
        budget=EpisodeBudget(args.trajectories),
        estimator="ppo_critic",
        advantage=AdvantageSettings(estimator="ppo_critic", gamma=0.99),
        objective="token_ppo",
        objective_settings=ObjectiveSettings(),
        minibatch_size=args.minibatch,
        score_micro_batch=args.micro_batch,
    )
    trainer = Trainer(
        config,
        policy,
        rollout,  # type: ignore[arg-type]
        CNNValue(CriticSettings(minibatch_size=64, predict_chunk=64), seed=0),
        build_updater(policy.model, UpdaterSettings(lr=1e-5)),
        out / "run",
    )
    rollout.size = (1, 2)  # a warm-up step: one-off allocations are not the batch's
    trainer.train_step()
    rollout.size = (args.trajectories, args.turns)
    baseline = _status_kib("VmRSS")
    _reset_peak()
    started = time.perf_counter()
    metrics = trainer.train_step()
    seconds = time.perf_counter() - started
    peak = _status_kib("VmHWM")
    n = args.trajectories * args.turns
    report = {
        "mode": args.mode,
        "trajectories": args.trajectories,
        "turns": args.turns,
        "frames": n,
        "frames_mib": n * args.frame_shape[0] * args.frame_shape[1] * 3 / 2**20,
        "baseline_mib": baseline / 1024,
        "peak_mib": peak / 1024,
        "step_mib": (peak - baseline) / 1024,
        "step_s": seconds,
        "actor_turns": metrics.get("actor/turns", 0.0),
    }
    print("RESULT " + json.dumps(report), flush=True)


def _run_child(args: argparse.Namespace, mode: str, scale: int, model: Path, tmp: Path) -> dict:
    root = round(scale**0.5)  # trajectories and turns both grow by sqrt(scale)
    trajectories, turns = args.base_trajectories * root, args.base_turns * root
    out = tmp / f"{mode}-{scale}"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--mode",
        mode,
        "--trajectories",
        str(trajectories),
        "--turns",
        str(turns),
        "--frame",
        args.frame,
        "--micro-batch",
        str(args.micro_batch),
        "--minibatch",
        str(args.minibatch),
        "--model",
        str(model),
        "--out",
        str(out),
    ]
    env = {**os.environ, "ODYSSEY_FRAMES_ON_DISK": ""}  # each mode as the bench says
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} x{scale} failed:\n{done.stderr[-4000:]}")
    return {"scale": scale, **json.loads(lines[-1].removeprefix("RESULT "))}


def parent(args: argparse.Namespace) -> list[dict]:
    from odyssey_core.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="odyssey-memory-bench-") as folder:
        tmp = Path(folder)
        model = build_tiny_model(tmp / "tiny", seed=0)
        rows = []
        for scale in SCALES:
            for mode in MODES:
                row = _run_child(args, mode, scale, model, tmp)
                rows.append(row)
                print(
                    f"{mode:>6} x{scale:<2} {row['trajectories']:>3} traj x {row['turns']:>3} "
                    f"turns = {row['frames']:>5} frames ({row['frames_mib']:7.1f} MiB): "
                    f"step peak +{row['step_mib']:7.1f} MiB over {row['baseline_mib']:.0f} MiB, "
                    f"{row['step_s']:.1f} s",
                    flush=True,
                )
    by = {(r["mode"], r["scale"]): r for r in rows}
    print("\npeak host memory added by one RL step (MiB), and its growth over 1x")
    print(f"{'scale':>5} {'frames MiB':>10} {'memory':>8} {'disk':>8} {'disk/memory':>11}")
    for scale in SCALES:
        m, d = by["memory", scale], by["disk", scale]
        print(
            f"{scale:>4}x {m['frames_mib']:>10.1f} {m['step_mib']:>8.1f} {d['step_mib']:>8.1f} "
            f"{d['step_mib'] / m['step_mib']:>11.2f}"
        )
    for mode in MODES:
        base = by[mode, 1]["step_mib"]
        growth = ", ".join(f"{s}x: {by[mode, s]['step_mib'] / base:.1f}x" for s in SCALES[1:])
        print(f"{mode:>6} growth over 1x ({growth}); data grew 4x, 16x")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-trajectories", type=int, default=4)
    parser.add_argument("--base-turns", type=int, default=16)
    parser.add_argument("--frame", default="288x320", help="HxW of each frame (Game Boy x2)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--minibatch", type=int, default=4096)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--trajectories", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.frame_shape = tuple(int(x) for x in args.frame.lower().split("x"))
    if args.child:
        child(args)
        return
    rows = parent(args)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

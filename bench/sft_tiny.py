"""Benchmark: SFT the tiny random Qwen3-VL on odland frames on CPU, then check what it learnt.

    .venv/bin/python bench/sft_tiny.py [--dataset DIR] [--out DIR] [--frames 2000] [--steps 300]

Without ``--dataset`` it builds a dataset of odland frames in the curation stage's format
(``data.parquet`` + ``frames/`` + ``manifest.json``). The annotation is a simple offline rule
on the emulator's own state (:func:`rule_teacher`): jump when an object is just ahead, keep
right while airborne, otherwise run right; perception and reasoning texts describe that
situation, written with ``protocol.format_response``. (``odyssey_core.data`` did not exist
when this was written, so no programmatic teacher from it is used.)

After training it samples answers on the held-out (val) frames and prints the format-valid
rate, the agreement of the answer buttons with the teacher's next to the majority-class rate,
and writes the loss curve to ``OUT/loss.png``. Not a test: it takes minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from odyssey_core.protocol import format_response

LOOKAHEAD_PX = 40  # objects closer than this in front of the hero call for a jump


def rule_teacher(info: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """(perception, reasoning, buttons) from the env's info, a stand-in for a VLM teacher."""
    hero_x = int(info.get("progress", 0))
    ahead = [o for o in info.get("objects", []) if 0 <= int(o["x"]) - hero_x <= LOOKAHEAD_PX]
    if not info.get("on_ground", True):
        return (
            "The hero is in the air.",
            "I keep moving right while I land.",
            ("right",),
        )
    if ahead:
        kind = ahead[0]["kind"]
        return (
            f"The hero stands on the ground and a {kind} is just ahead.",
            f"I jump forward to get past the {kind}.",
            ("a", "right"),
        )
    return (
        "The hero stands on the ground and the way ahead is clear.",
        "Running right makes progress toward the goal.",
        ("b", "right"),
    )


def build_odland_dataset(
    out_dir: str | Path,
    n_frames: int = 2000,
    *,
    seed: int = 0,
    val_fraction: float = 0.1,
    levels: tuple[str, ...] = ("1-1",),
    explore: float = 0.3,
) -> Path:
    """Play odland (teacher actions, ``explore`` share random) and write an SFT dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odyssey_core.envs import make_env
    from odyssey_core.protocol import GAMEBOY_SPACE

    out = Path(out_dir)
    (out / "frames").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    actions = GAMEBOY_SPACE.legal_actions()
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    per_level = -(-n_frames // len(levels))
    for level in levels:
        env = make_env(f"odland-{level}")
        obs, info = env.reset(seed=seed)
        frame_index, produced = 0, 0
        while produced < per_level and len(rows) < n_frames:
            perception, reasoning, buttons = rule_teacher(info)
            frame_hash = hashlib.sha1(obs.image.tobytes()).hexdigest()[:16]
            if frame_hash not in seen:  # identical frames would leak across splits
                seen.add(frame_hash)
                Image.fromarray(obs.image).save(out / "frames" / f"{frame_hash}.png")
                split = "val" if rng.random() < val_fraction else "train"
                rows.append(
                    {
                        "sample_id": f"odland-{level}-{frame_index:06d}",
                        "frame": f"frames/{frame_hash}.png",
                        "frame_hash": frame_hash,
                        "game": "odland",
                        "level": level,
                        "turn_text": obs.text,
                        "response": format_response(perception, reasoning, buttons),
                        "buttons": list(buttons),
                        "source": f"odland-{level}-rollout-seed{seed}",
                        "frame_index": frame_index,
                        "timestamp_s": frame_index / 60.0,
                        "teacher": "rule-v1",
                        "split": split,
                    }
                )
                produced += 1
            action = rng.choice(actions) if rng.random() < explore else buttons
            obs, _, terminated, truncated, info = env.step(action)
            frame_index += 1
            if terminated or truncated:
                obs, info = env.reset(seed=rng.randrange(1 << 30))
        env.close()
    pq.write_table(pa.Table.from_pylist(rows), out / "data.parquet")
    counts = Counter(r["split"] for r in rows)
    manifest = {"samples": len(rows), "splits": dict(counts), "teacher": "rule-v1"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def plot_losses(metrics_path: Path, png: Path) -> None:
    """Train (and eval) loss per step; matplotlib if installed, else plain PIL drawing."""
    records = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.figure(figsize=(6, 4))
        plt.plot(*zip(*train, strict=True), label="train")
        if evals:
            plt.plot(*zip(*evals, strict=True), "o-", label="val")
        plt.xlabel("step"), plt.ylabel("loss"), plt.yscale("log"), plt.legend()
        plt.savefig(png, dpi=100)
        return
    except ImportError:
        pass
    width, height, pad = 640, 400, 40
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    steps = [s for s, _ in train + evals]
    logs = [np.log10(max(v, 1e-6)) for _, v in train + evals]
    lo, hi = min(logs), max(logs) + 1e-9
    x_max = max(steps)

    def xy(step: float, value: float) -> tuple[float, float]:
        y = (np.log10(max(value, 1e-6)) - lo) / (hi - lo)
        return pad + (width - 2 * pad) * step / x_max, height - pad - (height - 2 * pad) * y

    draw.rectangle([pad, pad, width - pad, height - pad], outline="black")
    draw.line([xy(s, v) for s, v in train], fill="blue", width=2)
    if len(evals) > 1:
        draw.line([xy(s, v) for s, v in evals], fill="red", width=2)
    draw.text((pad, 10), f"loss (log10 {lo:.2f}..{hi:.2f}); blue train, red val", fill="black")
    draw.text((width - pad - 60, height - pad + 10), f"step {x_max}", fill="black")
    image.save(png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("out/bench-sft-tiny"))
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-frames", type=int, default=100)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # tiny matmuls: threads only add contention on a shared CPU
    from odyssey_core.models import build_tiny_model
    from odyssey_core.policy.base import GenerationParams
    from odyssey_core.sft.data import SFTDataset
    from odyssey_core.sft.settings import load_sft_settings
    from odyssey_core.sft.trainer import SFTTrainer

    args.out.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset
    if dataset is None:
        start = time.perf_counter()
        dataset = build_odland_dataset(
            args.out / "dataset", args.frames, levels=("1-1", "1-2", "1-3", "2-1")
        )
        print(f"built {dataset} in {time.perf_counter() - start:.0f}s (rule teacher)")
    model_dir = build_tiny_model(args.out / "tiny-model")
    settings = load_sft_settings("tiny", {"max_steps": args.steps, "epochs": 100})
    trainer = SFTTrainer(settings, dataset, model_dir, args.out / "run")
    n_train, n_val = len(trainer.train_set), len(trainer.val_set)
    print(f"train {n_train}  val {n_val}  steps {trainer.total_steps}")
    start = time.perf_counter()
    result = trainer.train()
    print(
        f"trained {result.steps} steps in {time.perf_counter() - start:.0f}s; "
        f"last train loss {result.train_loss:.4f}, val loss {result.eval_loss:.4f}"
    )
    plot_losses(trainer.metrics_path, args.out / "loss.png")

    # Held-out answers, sampled as a rollout would (temperature 1), and greedy.
    from odyssey_core.envs.base import Observation
    from odyssey_core.policy.hf import HFPolicy

    val = SFTDataset(dataset, split="val").samples[: args.eval_frames]
    train_buttons = Counter(tuple(s.buttons) for s in SFTDataset(dataset, split="train"))
    majority = train_buttons.most_common(1)[0][0]
    policy = HFPolicy(result.final_dir, game="odland")
    for name, params in (
        ("sampled", GenerationParams(max_new_tokens=64, temperature=1.0, seed=0)),
        ("greedy", GenerationParams(max_new_tokens=64, temperature=0.0)),
    ):
        valid = agree = 0
        for i in range(0, len(val), 8):
            chunk = val[i : i + 8]
            gens = policy.generate([Observation(s.image(), s.turn_text) for s in chunk], params)
            for sample, gen in zip(chunk, gens, strict=True):
                valid += gen.parsed.valid
                agree += gen.parsed.valid and set(gen.parsed.buttons) == set(sample.buttons)
        n = len(val)
        print(f"{name}: format-valid {valid / n:.1%}  button agreement {agree / n:.1%}  (n={n})")
    majority_rate = sum(tuple(s.buttons) == majority for s in val) / len(val)
    print(f"majority class {majority} on val: {majority_rate:.1%}")
    print(f"loss curve: {args.out / 'loss.png'}")


if __name__ == "__main__":
    main()

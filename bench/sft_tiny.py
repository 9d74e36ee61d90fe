"""Benchmark: SFT the tiny random Qwen3-VL on odland frames on CPU, then check what it learnt.

    .venv/bin/python bench/sft_tiny.py [--source curate|rule] [--dataset DIR] [--out DIR]
        [--frames 2000] [--levels 1-1,1-2,1-3] [--max-turns 400] [--max-steps 300]

``--source curate`` (the default) builds the dataset with the curation stage
(:mod:`odyssey_core.data`, preset ``configs/curate/tiny.yaml``): the search expert records a
walkthrough of each level (video + privileged-state sidecar), frames are sampled from it and
the programmatic teacher annotates them from the sidecar (the buttons are the expert's next
action). ``--frames`` is the total asked of the sampler; sampling keeps every distinct frame
the walkthroughs hold when they hold fewer (one video frame per game turn, so at most
``--max-turns`` per level), and the real count is printed. Walkthroughs already recorded under
``OUT/curate/walkthroughs`` for the same levels are reused (``--rerecord`` to record again).

``--source rule`` is the older offline mode: :func:`build_odland_dataset` plays odland itself
and annotates with a simple rule on the emulator's state (:func:`rule_teacher`): jump when an
object is just ahead, keep right while airborne, otherwise run right.

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


def curate_odland_dataset(
    out_dir: str | Path,
    n_frames: int = 2000,
    *,
    levels: tuple[str, ...] = ("1-1", "1-2", "1-3"),
    max_turns: int = 400,
    phash_threshold: int = 0,
    rerecord: bool = False,
) -> Path:
    """Curate odland with ``odyssey_core.data`` (expert walkthroughs, programmatic teacher).

    The tiny curation preset with: the given levels and turn limit, ``n_frames`` in total
    split over the levels, no oversampling beyond the walkthrough (every distinct frame is a
    candidate) and a pHash threshold of ``phash_threshold`` (0: drop only frames whose pHash
    equals an earlier one's; byte-identical frames are always dropped).
    """
    from odyssey_core.data.cli import (
        load_curate_config,
        run_annotate,
        run_build,
        run_record,
        run_sample,
        run_validate,
    )

    config = load_curate_config(
        "tiny",
        {
            "record": {"agent": "expert", "levels": list(levels), "max_turns": max_turns},
            "sampling": {
                "total_frames": n_frames,
                "oversample": 1.0,
                "phash_threshold": phash_threshold,
            },
            "teacher": {"name": "programmatic"},
            "show_progress": False,
        },
    )
    out = Path(out_dir)
    records = [out / "walkthroughs" / f"{config.game}-{level}.json" for level in levels]
    if rerecord or not all(path.is_file() for path in records):
        start = time.perf_counter()
        run_record(config, out)
        print(f"recorded {len(levels)} expert walkthroughs in {time.perf_counter() - start:.0f}s")
    else:
        print(f"reusing the expert walkthroughs in {out / 'walkthroughs'}")
    for path in records:
        info = json.loads(path.read_text())
        print(
            f"  {info['name']}: {info['frame_count']} frames, goal reached "
            f"{info['extra'].get('goal_reached')}, progress {info['extra'].get('final_progress')}"
            f"/{info['extra'].get('max_progress')}"
        )
    start = time.perf_counter()
    # Sampling reads every walkthrough in the folder: drop records of other levels.
    for path in (out / "walkthroughs").glob("*.json"):
        if path not in records:
            path.rename(path.with_suffix(".json.unused"))
    run_sample(config, out)
    run_annotate(config, out)
    run_validate(config, out)
    dataset = run_build(config, out)
    print(f"curated {dataset} in {time.perf_counter() - start:.0f}s (programmatic teacher)")
    return dataset


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
    parser.add_argument("--source", choices=("curate", "rule"), default="curate")
    parser.add_argument("--dataset", type=Path, default=None, help="an existing dataset folder")
    parser.add_argument("--out", type=Path, default=Path("out/bench-sft-tiny"))
    parser.add_argument("--frames", type=int, default=2000, help="frames asked in total")
    parser.add_argument("--levels", default=None, help="comma-separated odland levels")
    parser.add_argument("--max-turns", type=int, default=400, help="per walkthrough (curate)")
    parser.add_argument("--rerecord", action="store_true", help="record walkthroughs again")
    parser.add_argument("--max-steps", "--steps", dest="steps", type=int, default=300)
    parser.add_argument("--eval-frames", type=int, default=100)
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=0,
        help="generation budget; 0: the longest teacher answer in tokens plus 32",
    )
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
    if dataset is None and args.source == "curate":
        levels = tuple((args.levels or "1-1,1-2,1-3").split(","))
        dataset = curate_odland_dataset(
            args.out / "curate",
            args.frames,
            levels=levels,
            max_turns=args.max_turns,
            rerecord=args.rerecord,
        )
    elif dataset is None:
        levels = tuple((args.levels or "1-1,1-2,1-3,2-1").split(","))
        start = time.perf_counter()
        dataset = build_odland_dataset(args.out / "dataset", args.frames, levels=levels)
        print(f"built {dataset} in {time.perf_counter() - start:.0f}s (rule teacher)")
    manifest = json.loads((Path(dataset) / "manifest.json").read_text())
    print(f"dataset {dataset}: {manifest.get('num_samples', manifest.get('samples'))} frames")
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
    max_new = args.max_new_tokens
    if max_new <= 0:  # the curated answers run to ~190 tokens: a short budget truncates them
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(result.final_dir)
        rows = SFTDataset(dataset, split="train").samples + val
        max_new = max(len(tokenizer(s.response)["input_ids"]) for s in rows) + 32
    print(f"generating up to {max_new} new tokens per answer")
    for name, params in (
        ("sampled", GenerationParams(max_new_tokens=max_new, temperature=1.0, seed=0)),
        ("greedy", GenerationParams(max_new_tokens=max_new, temperature=0.0)),
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

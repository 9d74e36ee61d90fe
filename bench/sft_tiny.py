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

# Defaults of the curate source and the training run (chosen to fit ~25 min on the loaded
# 2-core development VM; see bench/RESULTS.md).
DEFAULT_LEVELS = ("1-1", "1-2", "1-3", "2-1", "2-2")
DEFAULT_EPISODES = 4
DEFAULT_EXPLORE_PROB = 0.05
DEFAULT_STEPS = 300
DEFAULT_LR = 2e-3
DEFAULT_BALANCE = "none"
DEFAULT_BALANCE_POWER = 0.5


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
    levels: tuple[str, ...] = DEFAULT_LEVELS,
    max_turns: int = 400,
    episodes: int = 4,
    explore_prob: float = 0.05,
    explore_turns: int = 4,
    phash_threshold: int = 2,
    rerecord: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Curate odland with ``odyssey_core.data`` (expert walkthroughs, programmatic teacher).

    The tiny curation preset with: the given levels and turn limit, ``episodes`` walkthroughs
    per level (the first clean, the others with random detours of the expert's play, see
    :class:`~odyssey_core.data.walkthroughs.RecordConfig`), ``n_frames`` in total split over
    the levels, every recorded frame a candidate (oversample 3) and the pHash threshold
    ``phash_threshold`` (2 bits, the preset's: near-duplicates would leak across the
    frame-hash split). Returns the dataset folder and the counts of each stage.
    """
    from odyssey_core.data.cli import (
        load_curate_config,
        run_annotate,
        run_build,
        run_record,
        run_sample,
        run_validate,
    )

    record = {
        "agent": "expert",
        "levels": list(levels),
        "max_turns": max_turns,
        "episodes_per_level": episodes,
        "clean_episodes": 1,
        "explore_prob": explore_prob if episodes > 1 else 0.0,
        "explore_turns": explore_turns,
    }
    config = load_curate_config(
        "tiny",
        {
            "record": record,
            "sampling": {
                "total_frames": n_frames,
                "oversample": 3.0,
                "phash_threshold": phash_threshold,
            },
            "teacher": {"name": "programmatic"},
            "show_progress": False,
        },
    )
    out = Path(out_dir)
    walk_dir = out / "walkthroughs"
    names = [
        config.record.walkthrough_name(level, episode)
        for level in levels
        for episode in range(episodes)
    ]
    records = [walk_dir / f"{name}.json" for name in names]
    # Reuse a recording only when it was made with exactly these settings.
    stamp = walk_dir / "bench-record.json"
    wanted = config.record.model_dump(mode="json")
    same = stamp.is_file() and json.loads(stamp.read_text()) == wanted
    record_s = 0.0
    if rerecord or not same or not all(path.is_file() for path in records):
        start = time.perf_counter()
        run_record(config, out)
        record_s = time.perf_counter() - start
        stamp.write_text(json.dumps(wanted, indent=2))
        print(f"recorded {len(records)} expert walkthroughs in {record_s:.0f}s")
    else:
        print(f"reusing the expert walkthroughs in {walk_dir}")
    recorded = 0
    for path in records:
        info = json.loads(path.read_text())
        extra = info["extra"]
        recorded += info["frame_count"]
        print(
            f"  {info['name']}: {info['frame_count']} frames, goal reached "
            f"{extra.get('goal_reached')}, progress {extra.get('final_progress')}"
            f"/{extra.get('max_progress')}, detours {extra.get('detours', 0)} "
            f"({extra.get('undone_detours', 0)} undone)"
        )
    start = time.perf_counter()
    # Sampling reads every walkthrough in the folder: set aside records of other runs.
    for path in walk_dir.glob("*.json"):
        if path not in records and path != stamp:
            path.rename(path.with_suffix(".json.unused"))
    run_sample(config, out)
    run_annotate(config, out)
    run_validate(config, out)
    dataset = run_build(config, out)
    curate_s = time.perf_counter() - start
    print(f"curated {dataset} in {curate_s:.0f}s (programmatic teacher)")
    counts = {
        "walkthroughs": len(records),
        "frames_recorded": recorded,
        "record_s": record_s,
        "curate_s": curate_s,
    }
    return dataset, counts


def _answer(buttons: tuple[str, ...] | list[str]) -> str:
    """An answer class as text (``a+right``): the set of buttons, sorted."""
    from odyssey_core.sft.data import answer_key

    return "+".join(answer_key(buttons))


def evaluate_answers(
    policy: Any, samples: list[Any], params: Any, majority: str, batch_size: int = 8
) -> dict[str, Any]:
    """Format-valid rate, agreement with the teacher's buttons (as sets), and where the
    answers agree: on frames whose teacher answer is the majority class, and on the others."""
    from odyssey_core.envs.base import Observation
    from odyssey_core.sft.data import answer_key

    valid = agree = 0
    agree_majority = agree_other = 0
    predicted: Counter[str] = Counter()
    for i in range(0, len(samples), batch_size):
        chunk = samples[i : i + batch_size]
        # Each item samples with its own seed (seed + position), whatever its batch.
        seeded = params.model_copy(update={"seed": i}) if params.seed is not None else params
        gens = policy.generate([Observation(s.image(), s.turn_text) for s in chunk], seeded)
        for sample, gen in zip(chunk, gens, strict=True):
            ok = bool(gen.parsed.valid)
            same = ok and answer_key(gen.parsed.buttons) == answer_key(sample.buttons)
            valid += ok
            agree += same
            predicted[_answer(gen.parsed.buttons) if ok else "(invalid)"] += 1
            if _answer(sample.buttons) == majority:
                agree_majority += same
            else:
                agree_other += same
    n = len(samples)
    n_majority = sum(_answer(s.buttons) == majority for s in samples)
    return {
        "n": n,
        "format_valid": valid / n,
        "agreement": agree / n,
        "recall_majority": agree_majority / max(1, n_majority),
        "recall_other": agree_other / max(1, n - n_majority),
        "n_other": n - n_majority,
        "agree_other": agree_other,
        "predicted": dict(predicted.most_common()),
    }


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
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="per level")
    parser.add_argument("--explore-prob", type=float, default=DEFAULT_EXPLORE_PROB)
    parser.add_argument("--phash-threshold", type=int, default=2)
    parser.add_argument("--rerecord", action="store_true", help="record walkthroughs again")
    parser.add_argument("--max-steps", "--steps", dest="steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--lr", type=float, default=DEFAULT_LR)
    parser.add_argument(
        "--answer-balance", choices=("none", "sampler", "loss"), default=DEFAULT_BALANCE
    )
    parser.add_argument("--balance-power", type=float, default=DEFAULT_BALANCE_POWER)
    parser.add_argument("--eval-frames", type=int, default=0, help="0: every val frame")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=0,
        help="generation budget; 0: the longest teacher answer in tokens plus 32",
    )
    args = parser.parse_args()
    began = time.perf_counter()

    import torch

    torch.set_num_threads(1)  # tiny matmuls: threads only add contention on a shared CPU
    from odyssey_core.models import build_tiny_model
    from odyssey_core.policy.base import GenerationParams
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.sft.data import SFTDataset
    from odyssey_core.sft.settings import load_sft_settings
    from odyssey_core.sft.trainer import SFTTrainer

    args.out.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset
    counts: dict[str, Any] = {}
    if dataset is None and args.source == "curate":
        levels = tuple(args.levels.split(",")) if args.levels else DEFAULT_LEVELS
        dataset, counts = curate_odland_dataset(
            args.out / "curate",
            args.frames,
            levels=levels,
            max_turns=args.max_turns,
            episodes=args.episodes,
            explore_prob=args.explore_prob,
            phash_threshold=args.phash_threshold,
            rerecord=args.rerecord,
        )
    elif dataset is None:
        levels = tuple((args.levels or "1-1,1-2,1-3,2-1").split(","))
        start = time.perf_counter()
        dataset = build_odland_dataset(args.out / "dataset", args.frames, levels=levels)
        print(f"built {dataset} in {time.perf_counter() - start:.0f}s (rule teacher)")
    manifest = json.loads((Path(dataset) / "manifest.json").read_text())
    counts["frames_in_dataset"] = manifest.get("num_samples", manifest.get("samples"))
    train_rows = SFTDataset(dataset, split="train").samples
    val_rows = SFTDataset(dataset, split="val").samples
    counts |= {"train": len(train_rows), "val": len(val_rows)}
    labels = {
        split: dict(Counter(_answer(s.buttons) for s in rows).most_common())
        for split, rows in (("train", train_rows), ("val", val_rows))
    }
    print(f"dataset {dataset}: {counts['frames_in_dataset']} frames")
    print(f"labels: train {labels['train']}")
    print(f"        val   {labels['val']}")

    model_dir = build_tiny_model(args.out / "tiny-model")
    overrides = {
        "max_steps": args.steps,
        "epochs": 100,
        "lr": args.lr,
        "answer_balance": args.answer_balance,
        "answer_balance_power": args.balance_power,
    }
    settings = load_sft_settings("tiny", overrides)
    trainer = SFTTrainer(settings, dataset, model_dir, args.out / "run")
    print(
        f"train {len(trainer.train_set)}  val {len(trainer.val_set)}  steps "
        f"{trainer.total_steps}  lr {settings.lr}  answer_balance {settings.answer_balance}"
        f" (power {settings.answer_balance_power})"
    )
    start = time.perf_counter()
    result = trainer.train()
    train_s = time.perf_counter() - start
    print(
        f"trained {result.steps} steps in {train_s:.0f}s; "
        f"last train loss {result.train_loss:.4f}, val loss {result.eval_loss:.4f}"
    )
    plot_losses(trainer.metrics_path, args.out / "loss.png")

    # Held-out answers: greedy, and sampled as a rollout would (temperature 1).
    val = val_rows[: args.eval_frames or None]
    majority = Counter(_answer(s.buttons) for s in train_rows).most_common(1)[0][0]
    majority_rate = sum(_answer(s.buttons) == majority for s in val) / len(val)
    policy = HFPolicy(result.final_dir, game="odland")
    max_new = args.max_new_tokens
    if max_new <= 0:  # the curated answers run to ~190 tokens: a short budget truncates them
        tokenizer = policy.processor.tokenizer
        max_new = max(len(tokenizer(s.response)["input_ids"]) for s in train_rows + val) + 32
    print(f"generating up to {max_new} new tokens per answer on {len(val)} val frames")
    start = time.perf_counter()
    decodings: dict[str, dict[str, Any]] = {}
    for name, params in (
        ("greedy", GenerationParams(max_new_tokens=max_new, temperature=0.0)),
        ("sampled", GenerationParams(max_new_tokens=max_new, temperature=1.0, seed=0)),
    ):
        r = evaluate_answers(policy, val, params, majority)
        decodings[name] = r
        print(
            f"{name}: format-valid {r['format_valid']:.1%}  agreement {r['agreement']:.1%}  "
            f"(on {majority} frames {r['recall_majority']:.1%}, on the other "
            f"{r['n_other']} {r['recall_other']:.1%})  answers {r['predicted']}"
        )
    eval_s = time.perf_counter() - start
    print(f"majority class {majority} (from train) on the same val frames: {majority_rate:.1%}")
    total_s = time.perf_counter() - began
    print(f"evaluated in {eval_s:.0f}s; total {total_s:.0f}s; loss curve: {args.out / 'loss.png'}")
    summary = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "counts": counts,
        "labels": labels,
        "train_loss": result.train_loss,
        "val_loss": result.eval_loss,
        "majority": majority,
        "majority_rate": majority_rate,
        "decodings": decodings,
        "seconds": {"train": train_s, "eval": eval_s, "total": total_s},
    }
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

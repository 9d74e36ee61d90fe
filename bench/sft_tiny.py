"""Benchmark: SFT the tiny random Qwen3-VL on odland frames on CPU, then check what it learnt.

    .venv/bin/python bench/sft_tiny.py [--source curate|rule] [--dataset DIR] [--out DIR]
        [--frames 2000] [--levels 1-1,...] [--episodes 7] [--explore-prob 0.08]
        [--balanced-steps N] [--balance-power P] [--plain-steps N] [--lr LR] [--plain-lr LR]
        [--model DIR | --default-patches] [--vision-lr-scale S] [--seed N]

``--source curate`` (the default) builds the dataset with the curation stage
(:mod:`odyssey_core.data`, preset ``configs/curate/odland-2k.yaml``): the search expert plays
each level several times (the first walkthrough its own line, the others with random detours
it has to recover from; video + privileged-state sidecar), about 2,000 distinct frames are
sampled (pHash de-duplication over all walkthroughs) and the programmatic teacher annotates
them from the sidecar (the buttons are the expert's next action). The flags override the
preset. Walkthroughs already recorded under ``OUT/curate/walkthroughs`` with the same recording
settings are reused (``--rerecord`` to record again).

``--source rule`` is the older offline mode: :func:`build_odland_dataset` plays odland itself
and annotates with a simple rule on the emulator's state (:func:`rule_teacher`): jump when an
object is just ahead, keep right while airborne, otherwise run right.

The model is the tiny random Qwen3-VL built with zero-mean patch filters
(``build_tiny_model(zero_mean_patches=True)``): with the default filters the frozen random
tower's output is nearly the same for every frame, and the model learns to ignore the image.
Training (``configs/sft/tiny.yaml`` with overrides) runs in two stages, both with the vision
encoder frozen (``vision_lr_scale: 0``; training it at the same or a tenth of the lr did
worse, see bench/RESULTS.md): ``--balanced-steps`` with ``answer_balance: sampler`` at
``--balance-power`` 0.5 (an answer of n_c rows is drawn in proportion to sqrt(n_c), so the
rare jumps are seen far more often than in the data), then ``--plain-steps`` on the data as
it is, from the first stage's weights, so the model's answer prior returns to the real one.
``--balanced-steps 0`` gives a single plain run.

After training it answers the held-out (val) frames, greedy and sampled (temperature 1), and
prints the format-valid rate, the agreement of the answer buttons with the teacher's (as sets)
next to the majority-class rate on the same frames, the frames won and lost against always
answering the majority class with an exact McNemar p-value, writes the loss curve to
``OUT/loss.png`` and everything to ``OUT/results.json``. Not a test: it takes ~20 minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from odyssey_core.protocol import format_response

LOOKAHEAD_PX = 40  # objects closer than this in front of the hero call for a jump

# Defaults of the curate source and of the two training stages, chosen to fit ~25 min on the
# shared 2-core development VM (see bench/RESULTS.md).
CURATE_PRESET = "odland-2k"
DEFAULT_BALANCED_STEPS = 3000
DEFAULT_BALANCE_POWER = 0.5
DEFAULT_LR = 2e-3
DEFAULT_PLAIN_STEPS = 500
DEFAULT_PLAIN_LR = 1e-3


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
    n_frames: int | None = None,
    *,
    preset: str = CURATE_PRESET,
    levels: tuple[str, ...] | None = None,
    max_turns: int | None = None,
    episodes: int | None = None,
    explore_prob: float | None = None,
    phash_threshold: int | None = None,
    rerecord: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Curate odland with ``odyssey_core.data`` (expert walkthroughs, programmatic teacher).

    The curation ``preset`` with the given overrides (None keeps the preset's value):
    ``n_frames`` in total, the levels, turn limit, walkthroughs per level (the first clean,
    the others with detours at ``explore_prob`` per turn) and pHash threshold. Returns the
    dataset folder and the counts and times of the stages.
    """
    from odyssey_core.data.cli import (
        load_curate_config,
        run_annotate,
        run_build,
        run_record,
        run_sample,
        run_validate,
    )

    record: dict[str, Any] = {}
    if levels is not None:
        record["levels"] = list(levels)
    if max_turns is not None:
        record["max_turns"] = max_turns
    if episodes is not None:
        record["episodes_per_level"] = episodes
        if episodes == 1:  # a single walkthrough per level is the clean one
            record["explore_prob"] = 0.0
    if explore_prob is not None:
        record["explore_prob"] = explore_prob
    sampling: dict[str, Any] = {}
    if n_frames is not None:
        sampling["total_frames"] = n_frames
    if phash_threshold is not None:
        sampling["phash_threshold"] = phash_threshold
    config = load_curate_config(
        preset, {"record": record, "sampling": sampling, "show_progress": False}
    )
    out = Path(out_dir)
    walk_dir = out / "walkthroughs"
    rec = config.record
    names = [
        rec.walkthrough_name(level, episode)
        for level in rec.levels
        for episode in range(rec.episodes_per_level)
    ]
    records = [walk_dir / f"{name}.json" for name in names]
    # Reuse a recording only when it was made with exactly these settings.
    stamp = walk_dir / "bench-record.json"
    wanted = rec.model_copy(update={"game": config.game}).model_dump(mode="json")
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
    samples = run_sample(config, out)
    run_annotate(config, out)
    run_validate(config, out)
    dataset = run_build(config, out)
    curate_s = time.perf_counter() - start
    print(f"curated {dataset} in {curate_s:.0f}s (programmatic teacher)")
    import pyarrow.parquet as pq

    counts = {
        "preset": preset,
        "levels": list(rec.levels),
        "walkthroughs": len(records),
        "frames_recorded": recorded,
        "frames_sampled": pq.read_metadata(samples / "samples.parquet").num_rows,
        "phash_threshold": config.sampling.phash_threshold,
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
    from odyssey_core.protocol import RESPONSE_FORMATS
    from odyssey_core.sft.data import answer_key

    answer_format = RESPONSE_FORMATS.get("odysseus")

    valid = agree = 0
    agree_majority = agree_other = 0
    predicted: Counter[str] = Counter()
    for i in range(0, len(samples), batch_size):
        chunk = samples[i : i + batch_size]
        # Each item samples with its own seed (seed + position), whatever its batch.
        seeded = params.model_copy(update={"seed": i}) if params.seed is not None else params
        gens = policy.generate([Observation(s.image(), s.turn_text) for s in chunk], seeded)
        for sample, gen in zip(chunk, gens, strict=True):
            parsed = answer_format.parse(gen.text)
            ok = bool(parsed.valid)
            same = ok and answer_key(parsed.buttons) == answer_key(sample.buttons)
            valid += ok
            agree += same
            predicted[_answer(parsed.buttons) if ok else "(invalid)"] += 1
            if _answer(sample.buttons) == majority:
                agree_majority += same
            else:
                agree_other += same
    n = len(samples)
    n_majority = sum(_answer(s.buttons) == majority for s in samples)
    # Paired against always answering the majority class on the same frames: the model wins
    # a frame it gets right where the majority class is wrong, and loses the reverse.
    wins, losses = agree_other, n_majority - agree_majority
    return {
        "n": n,
        "format_valid": valid / n,
        "agreement": agree / n,
        "recall_majority": agree_majority / max(1, n_majority),
        "recall_other": agree_other / max(1, n - n_majority),
        "n_other": n - n_majority,
        "agree_other": agree_other,
        "predicted": dict(predicted.most_common()),
        "wins_vs_majority": wins,
        "losses_vs_majority": losses,
        "mcnemar_p": mcnemar_exact_p(wins, losses),
    }


def mcnemar_exact_p(wins: int, losses: int) -> float:
    """Two-sided exact McNemar p-value: the chance of a split at least this uneven among the
    ``wins + losses`` discordant frames if either side were equally likely to win each."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def plot_losses(records: list[dict[str, Any]], png: Path, switch: int | None = None) -> None:
    """Train (and val) loss per step, a dashed line where the second stage starts;
    matplotlib if installed, else plain PIL drawing."""
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.figure(figsize=(7, 4))
        plt.plot(*zip(*train, strict=True), lw=0.8, label="train (stage 1: weighted draws)")
        if evals:
            plt.plot(*zip(*evals, strict=True), "o-", ms=3, label="val")
        if switch:
            plt.axvline(switch, ls="--", c="grey", label="stage 2: plain data")
        plt.xlabel("optimizer step"), plt.ylabel("response cross-entropy (nats/token)")
        plt.yscale("log"), plt.legend(), plt.tight_layout()
        plt.savefig(png, dpi=100)
        plt.close()
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
    if switch:
        draw.line([xy(switch, 10**lo), xy(switch, 10**hi)], fill="grey", width=1)
    draw.text((pad, 10), f"loss (log10 {lo:.2f}..{hi:.2f}); blue train, red val", fill="black")
    draw.text((width - pad - 60, height - pad + 10), f"step {x_max}", fill="black")
    image.save(png)


def train_stage(
    dataset: Path, model_dir: Path, out: Path, overrides: dict[str, Any]
) -> tuple[Any, list[dict[str, Any]], float]:
    """One SFT run of the tiny preset with ``overrides``: (result, metric records, seconds)."""
    from odyssey_core.sft.settings import load_sft_settings
    from odyssey_core.sft.trainer import SFTTrainer

    settings = load_sft_settings("tiny", {"epochs": 1000, "eval_every": 100, **overrides})
    trainer = SFTTrainer(settings, dataset, model_dir, out)
    print(
        f"  {trainer.total_steps} steps, lr {settings.lr}, answer_balance "
        f"{settings.answer_balance} (power {settings.answer_balance_power}), "
        f"vision_lr_scale {settings.vision_lr_scale}"
    )
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    records = [json.loads(x) for x in trainer.metrics_path.read_text().splitlines() if x]
    print(
        f"  trained {result.steps} steps in {seconds:.0f}s; last train loss "
        f"{result.train_loss:.4f}, val loss {result.eval_loss:.4f}"
    )
    return result, records, seconds


def cnn_reference(
    train_rows: list[Any], val_rows: list[Any], epochs: int = 30, seed: int = 0
) -> float:
    """Val accuracy of a small CNN trained straight on frame -> answer class: a rough ceiling
    of how well the teacher's next action can be told from a single frame (the expert also
    acts on timing and momentum the frame does not show)."""
    import torch
    from torch import nn

    classes = sorted({_answer(s.buttons) for s in train_rows + val_rows})
    index = {c: i for i, c in enumerate(classes)}

    def tensors(rows: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        frames = [np.asarray(Image.fromarray(s.image()).convert("L"), np.float32) for s in rows]
        x = torch.tensor(np.stack(frames) / 255.0).unsqueeze(1)
        return x, torch.tensor([index[_answer(s.buttons)] for s in rows])

    (x_train, y_train), (x_val, y_val) = tensors(train_rows), tensors(val_rows)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = nn.Sequential(
            nn.Conv2d(1, 16, 8, 4), nn.ReLU(),
            nn.Conv2d(16, 32, 4, 2), nn.ReLU(),
            nn.Conv2d(32, 32, 3, 1), nn.ReLU(),
            nn.Flatten(), nn.LazyLinear(128), nn.ReLU(), nn.Linear(128, len(classes)),
        )  # fmt: skip
        net(x_train[:1])
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(epochs):
        for batch in torch.randperm(len(x_train), generator=generator).split(64):
            loss = nn.functional.cross_entropy(net(x_train[batch]), y_train[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        return float((net(x_val).argmax(1) == y_val).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("curate", "rule"), default="curate")
    parser.add_argument("--dataset", type=Path, default=None, help="an existing dataset folder")
    parser.add_argument("--out", type=Path, default=Path("out/bench-sft-tiny"))
    parser.add_argument("--model", type=Path, default=None, help="start model (default: tiny)")
    parser.add_argument(
        "--default-patches",
        action="store_true",
        help="the tiny model's default patch filters (not zero-mean: the frozen tower then "
        "barely tells frames apart)",
    )
    parser.add_argument("--frames", type=int, default=None, help="total (preset: 2000)")
    parser.add_argument("--levels", default=None, help="comma-separated odland levels")
    parser.add_argument("--max-turns", type=int, default=None, help="per walkthrough")
    parser.add_argument("--episodes", type=int, default=None, help="walkthroughs per level")
    parser.add_argument("--explore-prob", type=float, default=None, help="detours per turn")
    parser.add_argument("--phash-threshold", type=int, default=None)
    parser.add_argument("--rerecord", action="store_true", help="record walkthroughs again")
    parser.add_argument("--balanced-steps", type=int, default=DEFAULT_BALANCED_STEPS)
    parser.add_argument("--balance-power", type=float, default=DEFAULT_BALANCE_POWER)
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help="stage 1 peak lr")
    parser.add_argument("--plain-steps", type=int, default=DEFAULT_PLAIN_STEPS)
    parser.add_argument("--plain-lr", type=float, default=DEFAULT_PLAIN_LR)
    parser.add_argument("--vision-lr-scale", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0, help="training seed (draw order)")
    parser.add_argument(
        "--cnn-reference",
        action="store_true",
        help="only train a small CNN on frame -> answer and print its val accuracy",
    )
    parser.add_argument("--eval-frames", type=int, default=0, help="0: every val frame")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=0,
        help="generation budget; 0: the longest teacher answer in tokens plus 32",
    )
    args = parser.parse_args()
    if args.balanced_steps + args.plain_steps <= 0:
        parser.error("give --balanced-steps or --plain-steps")
    began = time.perf_counter()

    import torch

    torch.set_num_threads(1)  # tiny matmuls: threads only add contention on a shared CPU
    from odyssey_core.models import build_tiny_model
    from odyssey_core.policy.base import GenerationParams
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.sft.data import SFTDataset

    args.out.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset
    counts: dict[str, Any] = {}
    if dataset is None and args.source == "curate":
        dataset, counts = curate_odland_dataset(
            args.out / "curate",
            args.frames,
            levels=tuple(args.levels.split(",")) if args.levels else None,
            max_turns=args.max_turns,
            episodes=args.episodes,
            explore_prob=args.explore_prob,
            phash_threshold=args.phash_threshold,
            rerecord=args.rerecord,
        )
    elif dataset is None:
        levels = tuple((args.levels or "1-1,1-2,1-3,2-1").split(","))
        start = time.perf_counter()
        dataset = build_odland_dataset(args.out / "dataset", args.frames or 2000, levels=levels)
        print(f"built {dataset} in {time.perf_counter() - start:.0f}s (rule teacher)")
    dataset = Path(dataset)
    manifest = json.loads((dataset / "manifest.json").read_text())
    counts["frames_in_dataset"] = manifest.get("num_samples", manifest.get("samples"))
    train_rows = SFTDataset(dataset, split="train").samples
    val_rows = SFTDataset(dataset, split="val").samples
    counts |= {"train": len(train_rows), "val": len(val_rows)}
    labels = {
        split: dict(Counter(_answer(s.buttons) for s in rows).most_common())
        for split, rows in (("train", train_rows), ("val", val_rows))
    }
    print(f"dataset {dataset}: {counts}")
    print(f"labels: train {labels['train']}")
    print(f"        val   {labels['val']}")
    majority = next(iter(labels["train"]))  # the labels are counted most common first
    if args.cnn_reference:
        rate = sum(_answer(s.buttons) == majority for s in val_rows) / len(val_rows)
        accuracy = cnn_reference(train_rows, val_rows)
        print(f"CNN frame -> answer, val accuracy {accuracy:.1%} (majority class {rate:.1%})")
        return

    model_dir = args.model or build_tiny_model(
        args.out / "tiny-model", zero_mean_patches=not args.default_patches
    )
    vision = {"vision_lr_scale": args.vision_lr_scale, "seed": args.seed}
    records: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    result = None
    if args.balanced_steps:
        print("stage 1: answers drawn balanced")
        stage1 = {
            "max_steps": args.balanced_steps,
            "lr": args.lr,
            "answer_balance": "sampler",
            "answer_balance_power": args.balance_power,
            **vision,
        }
        result, stage_records, seconds["stage1"] = train_stage(
            dataset, model_dir, args.out / "stage1", stage1
        )
        records += stage_records
        model_dir = result.final_dir
    if args.plain_steps:
        print("stage 2: the data as it is" if args.balanced_steps else "plain SFT")
        stage2 = {"max_steps": args.plain_steps, "lr": args.plain_lr, **vision}
        result, stage_records, seconds["stage2"] = train_stage(
            dataset, model_dir, args.out / "stage2", stage2
        )
        offset = args.balanced_steps
        records += [{**r, "step": r["step"] + offset} for r in stage_records]
    assert result is not None
    switch = args.balanced_steps if args.balanced_steps and args.plain_steps else None
    plot_losses(records, args.out / "loss.png", switch)

    # Held-out answers: greedy, and sampled as a rollout would (temperature 1).
    val = val_rows[: args.eval_frames or None]
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
        print(
            f"  vs the majority class: {r['wins_vs_majority']} frames won, "
            f"{r['losses_vs_majority']} lost (exact McNemar p = {r['mcnemar_p']:.3f})"
        )
    seconds["eval"] = time.perf_counter() - start
    print(f"majority class {majority} (from train) on the same val frames: {majority_rate:.1%}")
    seconds["total"] = time.perf_counter() - began
    print(
        f"evaluated in {seconds['eval']:.0f}s; total {seconds['total']:.0f}s; "
        f"loss curve: {args.out / 'loss.png'}"
    )
    summary = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "counts": counts,
        "labels": labels,
        "final_train_loss": result.train_loss,
        "final_val_loss": result.eval_loss,
        "majority": majority,
        "majority_rate": majority_rate,
        "decodings": decodings,
        "seconds": seconds,
    }
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

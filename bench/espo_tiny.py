"""SFT only vs vanilla GRPO vs ESPO on the generated tiny episodes: a CPU benchmark (not a test).

Per training seed (``--seeds``):

1. SFT cold start: ``--sft-epochs`` epochs on the demonstrations of the tiny preset's training
   split (dataset seed 0), the tiny pipeline's SFT settings. This model is "SFT only".
2. From it, vanilla GRPO (``configs/espo/pipeline/variants/vanilla_grpo.yaml``: step rewards,
   shuffled steps) and ESPO (``configs/espo/tiny.yaml``: A_step + w * A_COUT, the episodic
   sampler) train **interleaved**, one step each in turn, until each has spent ``--budget-s``
   seconds of its own step time, so CPU noise hits both alike and the budget is the same.
3. The three models answer every step of a held-out dataset (the tiny preset generated with
   ``--eval-seed``: other users, other catalogues; all its splits) teacher-forced and greedy:
   EleAcc, Op F1, Step SR (over the GUI steps), RecAcc, format-valid and the all-steps /
   per-type / text-F1 readings, with the episode-bootstrap intervals of
   :mod:`odyssey_core.recipes.espo.metrics`; then mean +- s.e. over the training seeds, and
   every label-only baseline on the same episodes.

    .venv/bin/python bench/espo_tiny.py                # the defaults recorded in RESULTS.md
    .venv/bin/python bench/espo_tiny.py --seeds 1 --budget-s 30 --sft-epochs 1   # a smoke run
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.fidelity.espo import (
    cold_start,
    evaluate_model,
    evaluation_episodes,
    history_window,
    save_policy,
    tiny_dataset,
    variant_settings,
)
from odyssey_core.recipes.espo.evaluation import best_achievable_rec_acc
from odyssey_core.recipes.espo.metrics import trivial_baselines
from odyssey_core.recipes.espo.settings import load_espo_settings
from odyssey_core.recipes.espo.train import build_trainer

# the tiny preset's answer length, which the longest demonstrated answer fits
TINY_MAX_NEW_TOKENS = load_espo_settings("tiny").rollout.generation.max_new_tokens
METHODS = ("sft_only", "vanilla_grpo", "espo")
KEYS = (
    "ele_acc",
    "op_f1",
    "step_sr",
    "rec_acc",
    "format_valid",
    "op_f1_macro",
    "op_f1_click",
    "op_f1_type",
    "op_f1_scroll",
    "op_f1_exit",
    "op_f1_all_steps",
    "step_sr_text_f1",
    "step_sr_all_steps",
)


def train_interleaved(
    work: Path, data: Path, start: Path, seed: int, budget_s: float, lr: float
) -> tuple[dict[str, Path], dict[str, int]]:
    """Vanilla GRPO and ESPO one step each in turn until each has spent ``budget_s`` seconds
    of its own step time (CPU noise hits both alike)."""
    more = {"ppo": {"lr": lr}}
    trainers = {
        name: build_trainer(variant_settings(name, start, data, seed, more), work / name)
        for name in METHODS[1:]
    }
    spent = dict.fromkeys(trainers, 0.0)
    try:
        while min(spent.values()) < budget_s:
            for name, trainer in trainers.items():
                if spent[name] >= budget_s:
                    continue
                t0 = time.perf_counter()
                trainer.train_step()
                spent[name] += time.perf_counter() - t0
        models = {name: save_policy(trainer) for name, trainer in trainers.items()}
        return models, {name: t.step for name, t in trainers.items()}
    finally:
        for trainer in trainers.values():
            trainer.close()


def mean_se(values: list[float]) -> str:
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return f"{100 * x.mean():.1f}"
    return f"{100 * x.mean():.1f} ± {100 * x.std(ddof=1) / math.sqrt(x.size):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sft-epochs", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=240.0, help="RL seconds per method")
    parser.add_argument("--lr", type=float, default=1e-4, help="the tiny preset's RL rate")
    parser.add_argument("--eval-seed", type=int, default=1)
    parser.add_argument(
        "--max-new-tokens", type=int, default=TINY_MAX_NEW_TOKENS, help="the tiny preset's"
    )
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    work = args.work or Path(tempfile.mkdtemp(prefix="espo-bench-"))
    train_data = tiny_dataset(work / "data-train", 0)
    eval_data = tiny_dataset(work / f"data-eval-{args.eval_seed}", args.eval_seed)
    history = history_window()
    rows: dict[str, list[Any]] = {m: [] for m in METHODS}
    steps: dict[str, list[int]] = {m: [] for m in METHODS[1:]}
    started = time.perf_counter()
    for seed in range(args.seeds):
        seed_dir = work / f"seed-{seed}"
        start = cold_start(seed_dir, train_data, seed, epochs=args.sft_epochs, history=history)
        models, done = train_interleaved(seed_dir, train_data, start, seed, args.budget_s, args.lr)
        models = {"sft_only": start, **models}
        for name in METHODS:
            metrics = evaluate_model(
                models[name], eval_data, max_new_tokens=args.max_new_tokens, history=history
            )
            rows[name].append(metrics)
        for name, n in done.items():
            steps[name].append(n)
        print(f"seed {seed} done after {time.perf_counter() - started:.0f} s", flush=True)
    print(f"\n{args.seeds} seeds, SFT {args.sft_epochs} epochs, RL budget {args.budget_s:.0f} s")
    print(f"RL steps per seed: {steps}")
    print("\n| method | " + " | ".join(KEYS) + " |")
    print("|---" * (len(KEYS) + 1) + "|")
    for name in METHODS:
        cells = [mean_se([m[k].value for m in rows[name]]) for k in KEYS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    episodes = [e for chosen in evaluation_episodes(eval_data).values() for e in chosen]
    for name, m in trivial_baselines(episodes, resamples=1000).items():
        cells = [f"{100 * m[k].value:.1f}" if k in m else "–" for k in KEYS]
        print(f"| baseline: {name} | " + " | ".join(cells) + " |")
    print(f"\n{best_achievable_rec_acc(episodes).line()}")
    print("\nper seed, with the episode-bootstrap 95% interval of each metric:")
    for name in METHODS:
        for seed, m in enumerate(rows[name]):
            cells = [
                f"{k} {100 * m[k].value:.1f} [{100 * m[k].low:.1f}, {100 * m[k].high:.1f}]"
                for k in KEYS
            ]
            print(f"  {name} seed {seed}: " + "; ".join(cells))
    print(f"\ntotal {time.perf_counter() - started:.0f} s; work folder {work}")


if __name__ == "__main__":
    main()

"""RL only vs GTR on Numberline and EZPoints with the tiny model: a CPU benchmark (not a test).

Per env (``--envs``):

1. Format warm-up. A random tiny Qwen3-VL never writes ``"action": ...``, and GTR's thought
   cloning trains the thought tokens only, so neither variant could act without a start that
   knows the answer format (the paper starts from LLaVA-sft for the same reason). The warm-up
   is GTR with PPO off and ``sft.target: full_response``: ``--warmup-s`` seconds of cloning the
   programmatic corrector's whole answers on states the warming policy visits.
2. From that checkpoint, ``configs/gtr/ablations/rl_only.yaml`` and ``gtr.yaml`` (Table 2 loss
   settings, laid under ``configs/gtr/tiny.yaml``'s CPU sizes) train **interleaved**, one step
   each in turn, until each has spent ``--budget-s`` seconds of its own step time, so CPU noise
   hits both alike and the budget is the same; the same seed gives both the same first rollout.
   GTR's SFT term costs time, so it gets fewer steps in the same budget.
3. The warm checkpoint and both variants are evaluated on the same ``--episodes`` deals
   (fixed seeds; the policy samples as in training): success rate ± s.e., mean task return
   ± s.e., the share of answers that were not a legal action, and the thought-collapse
   metrics of the evaluation issue (valid rate, distinct-1/2, share of the same thought for
   different states, thought-action agreement, thought length). "Over training" shows the same
   metrics on the training rollouts, mean over the first and the last fifth of the steps.

Bench choices, the same for both variants: a constant learning rate, ``--lr`` (the tiny
preset's 1e-4; Table 2's cosine runs over 25 updates, a unit a time budget does not fix) and
``--warmup-lr`` for the warm-up; ``--max-new-tokens`` per env long enough for the corrector's
answers (about 66 tokens on Numberline, 112 on EZPoints); ``--turns-per-step`` turns per
update over 4 envs; ``max_steps`` 6 per episode. Every one is a flag; the defaults are the
ones recorded in bench/RESULTS.md and fit in about 12 minutes on 2 cores:

    .venv/bin/python bench/gtr_cards.py
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.config import config_dir
from odyssey_core.fidelity.gtr import COLLAPSE_KEYS, gtr_settings, over_training, train_for
from odyssey_core.fidelity.gtr import evaluate as evaluate_trainer
from odyssey_core.recipes.gtr.evaluation import GTREvaluation
from odyssey_core.recipes.gtr.settings import GTRSettings
from odyssey_core.recipes.gtr.train import build_trainer
from odyssey_core.rl.checkpoint import policy_dir
from odyssey_core.rl.trainer import Trainer

VARIANTS = ("rl_only", "gtr")


def settings_for(
    preset: Path, env: str, model: Path, args: argparse.Namespace, lr: float
) -> GTRSettings:
    return gtr_settings(
        preset,
        env,
        model,
        seed=args.seed,
        lr=lr,
        max_steps=args.max_steps,
        turns_per_step=args.turns_per_step,
        max_new_tokens=args.max_new_tokens,
    )


def evaluate(trainer: Trainer, args: argparse.Namespace) -> GTREvaluation:
    return evaluate_trainer(trainer, args.episodes)


def pm(mean: float, se: float, digits: int = 3) -> str:
    return f"{mean:.{digits}f} ± {se:.{digits}f}" if math.isfinite(se) else f"{mean:.{digits}f}"


def run_env(env: str, base: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    ablations = config_dir() / "gtr" / "ablations"
    # 1. the shared warm start: full-response cloning, no PPO
    warm_settings = settings_for(ablations / "sft_only.yaml", env, base, args, args.warmup_lr)
    warm_settings = warm_settings.model_copy(
        update={"sft": warm_settings.sft.model_copy(update={"target": "full_response"})}
    )
    warm = build_trainer(warm_settings, work / "warm")
    warm_run = train_for({"warm": warm}, seconds=args.warmup_s)["warm"]
    checkpoint = warm.save()
    results: dict[str, Any] = {"warm": {"evaluation": evaluate(warm, args), **warm_run}}
    results["warm"]["sft_loss"] = (
        warm_run["history"][0].get("sft/loss_per_token", math.nan),
        warm_run["history"][-1].get("sft/loss_per_token", math.nan),
    )
    warm.close()
    # 2. both variants from the warm weights, interleaved under one budget
    start = policy_dir(checkpoint)
    trainers = {
        name: build_trainer(
            settings_for(ablations / f"{name}.yaml", env, start, args, args.lr), work / name
        )
        for name in VARIANTS
    }
    runs = train_for(trainers, seconds=args.budget_s)
    for name, trainer in trainers.items():
        results[name] = {"evaluation": evaluate(trainer, args), **runs[name]}
        trainer.close()
    results["show_answers"] = args.show_answers
    return results


def table(env: str, results: dict[str, Any]) -> str:
    head = (
        "| model | steps | turns | train s | success ± s.e. | return ± s.e. | invalid |"
        " valid | distinct-1 | distinct-2 | same thought, other state | agreement |"
        " thought tokens |"
    )
    episodes = len(results["warm"]["evaluation"].returns)
    lines = [f"**{env}** (evaluation: {episodes} episodes on fixed deals)", "", head]
    lines.append("|" + "---|" * 13)
    for name in ("warm", *VARIANTS):
        r = results[name]
        e = r["evaluation"].summary()
        turns = sum(h["rollout/turns"] for h in r["history"])
        c = [e[f"collapse/{k}"] for k in COLLAPSE_KEYS]
        success = pm(e["success_rate"], e["success_se"])
        ret = pm(e["mean_return"], e["return_se"], 2)
        cells = [f"{x:.3f}" for x in c[:-1]] + [f"{c[-1]:.1f}"]
        lines.append(
            f"| {name} | {len(r['history'])} | {turns:.0f} | {r['seconds']:.0f} | {success} "
            f"| {ret} | {e['invalid_rate']:.3f} | " + " | ".join(cells) + " |"
        )
    loss = results["warm"]["sft_loss"]
    lines += ["", f"Warm-up cloning loss per token: {loss[0]:.3f} -> {loss[1]:.3f}."]
    a, b = (results[n]["evaluation"] for n in VARIANTS)
    diff = np.mean(b.successes) - np.mean(a.successes)
    se = math.hypot(*(np.std(x.successes, ddof=1) / math.sqrt(len(x.successes)) for x in (a, b)))
    ret_diff = np.mean(b.returns) - np.mean(a.returns)
    ret_se = math.hypot(*(np.std(x.returns, ddof=1) / math.sqrt(len(x.returns)) for x in (a, b)))
    steps = len(results["gtr"]["history"]) / max(1, len(results["rl_only"]["history"]))
    lines.append(
        f"GTR - RL only: success {diff:+.3f} (s.e. {se:.3f}), return {ret_diff:+.2f} "
        f"(s.e. {ret_se:.2f}); GTR made {steps:.2f}x the steps of RL only in the same budget."
    )
    for name in ("warm", *VARIANTS):
        for answer in results[name]["evaluation"].answers[: results["show_answers"]]:
            lines.append(f"- {name} answer: `{answer!r}`")
    lines += ["", "Over training (rollouts; first fifth of the steps -> last fifth):", ""]
    lines += ["| variant | " + " | ".join(COLLAPSE_KEYS) + " |", "|---|" + "---|" * 6]
    for name in ("warm", *VARIANTS):
        drift = over_training(results[name]["history"])
        cells = [f"{drift[k][0]:.2f} -> {drift[k][1]:.2f}" for k in COLLAPSE_KEYS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default="cards-numberline,cards-ezpoints")
    parser.add_argument("--warmup-s", type=float, default=100.0, help="format warm-up per env")
    parser.add_argument("--warmup-lr", type=float, default=1e-3)
    parser.add_argument("--budget-s", type=float, default=100.0, help="per variant per env")
    parser.add_argument("--episodes", type=int, default=24, help="evaluation episodes")
    parser.add_argument("--turns-per-step", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: per env")
    parser.add_argument("--max-steps", type=int, default=6, help="turns per episode")
    parser.add_argument(
        "--lr", type=float, default=1e-4, help="both variants (configs/gtr/tiny.yaml's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show-answers", type=int, default=2, help="evaluation answers shown")
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: temp)")
    args = parser.parse_args()

    # One thread: the tiny model gains nothing from more, and on a busy 2-core machine OpenMP
    # threads waiting on each other make every small matmul many times slower.
    torch.set_num_threads(1)
    logging.getLogger("odyssey_core.recipes.gtr.train").setLevel(logging.ERROR)  # collapse warnings
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        from odyssey_core.models.tiny import build_tiny_model

        base = build_tiny_model(work / "tiny-base", seed=0)
        for env in args.envs.split(","):
            results = run_env(env, Path(base), work / env, args)
            print(table(env, results), flush=True)
            print(flush=True)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

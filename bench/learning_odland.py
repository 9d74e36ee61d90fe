"""Does RL move the tiny model on odland 1-1? A CPU benchmark (not a test).

1. Format warm-up (the bench stays self-contained: odyssey_core.sft needs a curated dataset
   folder). The tiny random Qwen3-VL gets ``--warmup-steps`` steps of cross-entropy on
   ``<answer>[...]</answer>`` answers whose buttons are drawn afresh, uniformly, from the
   search expert's eight actions every time a frame is used, on frames of odland 1-1 reached
   by playing that same mix. A label that is redrawn on every visit cannot be memorised, so the
   warm policy answers in the format with a spread over the eight actions (it sees no reason
   to prefer one): something for RL to choose between. Of the eight, ``a+right`` gains the
   most ground per turn (a jump holds the buttons 15 frames, not 5), then ``b+right``, then
   ``right``; three stand still and two walk back.
2. Evaluate the warm checkpoint: ``--episodes`` episodes of ``--eval-turns`` turns, sampled at
   temperature 1 from fixed seeds; mean progress at the last turn +- standard error.
3. For each estimator (ppo_critic_pos, grpo_outcome, reinforce_pp): a fresh Odysseus trainer from
   the warm checkpoint, trained for the same ``--budget-s`` seconds of RL steps (the critic
   warm-up of ppo_critic_pos included, the evaluations not), with the same evaluation (same
   episodes, seeds, turns, temperature) after half the budget and at the end. Printed side by
   side: steps, progress at half and after, the difference and its z-score against the
   standard error of the difference, the share of a+right, the critic's explained variance,
   the critic's share of update time, and where a step's time goes. Everything is seeded, so
   the result is a function of the number of steps; a busier machine gets fewer of them.

Every hyper-parameter is a flag; the defaults are the ones recorded in bench/RESULTS.md:

    .venv/bin/python bench/learning_odland.py
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.fidelity import odysseus_engine as engine
from odyssey_core.fidelity.odysseus_engine import EVAL_SEED, GENERATION, MIX, evaluate, mix_frames
from odyssey_core.recipes.odysseus.settings import RLTrainSettings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.advantages import ESTIMATORS
from odyssey_core.rl.policy import build_policy
from odyssey_core.rl.trainer import Trainer

LEVEL = "odland-1-1"


def format_warmup(
    model_dir: Path, out_dir: Path, steps: int, lr: float, batch: int, seed: int
) -> tuple[Path, list[float]]:
    """Cross-entropy on formatted answers with freshly drawn MIX buttons on frames of LEVEL
    reached by playing MIX; saves to ``out_dir``."""
    frames = mix_frames(LEVEL, episodes=6, turns=16, seed=seed)
    return engine.format_warmup(model_dir, out_dir, steps, lr, batch, seed, frames=frames)


def settings_for(
    model_dir: Path, estimator: str, args: argparse.Namespace, *, evaluation: bool = False
) -> RLTrainSettings:
    # The critic warm-up holds the actor back; only the estimators that read V(o_t) need it.
    critic_warmup = args.critic_warmup if ESTIMATORS.get(estimator).needs_values else 0
    return RLTrainSettings.model_validate(
        {
            "seed": args.seed,
            "steps": 10**6,
            "checkpoint_every": 10**6,
            "model": {"path": str(model_dir)},
            "levels": [LEVEL],
            "rollout": {
                "num_trajectories": args.episodes if evaluation else args.trajectories,
                "max_turns": args.eval_turns if evaluation else args.max_turns,
                "n_envs": args.eval_envs if evaluation else args.n_envs,
                "generation": GENERATION,
                "score_micro_batch": 8,
            },
            "advantage": {"estimator": estimator},
            "ppo": {"minibatch_size": args.minibatch, "lr": args.lr},
            "critic": {
                "input_height": 72,
                "input_width": 80,
                "minibatch_size": args.critic_minibatch,
                "epochs": args.critic_epochs,
                "warmup_steps": critic_warmup,
            },
            "curriculum": {"enabled": False},
        }
    )


def describe(name: str, result: dict[str, Any]) -> str:
    top = ", ".join(f"{k} {v / result['turns']:.0%}" for k, v in result["buttons"].most_common(4))
    return (
        f"{name}: progress {result['mean']:.1f} +- {result['se']:.1f}, "
        f"valid {result['valid']:.0%}, deaths {result['deaths']}, pressed: {top}"
    )


def train_for(
    trainer: Trainer, budget_s: float, midpoint: Callable[[], None] | None = None
) -> list[dict[str, float]]:
    """RL steps until ``budget_s`` seconds of training have passed; ``midpoint()`` (an
    evaluation, not counted in the budget) runs once after half of it."""
    trained_s, history = 0.0, []
    while trained_s < budget_s:
        started = time.perf_counter()
        m = trainer.train_step()
        trained_s += time.perf_counter() - started
        history.append(m)
        print(
            f"    step {len(history):3d}  {m['time/step_s']:5.1f}s  rollout progress "
            f"{m[f'{LEVEL}/progress_mean']:6.1f}  actor turns {m.get('actor/turns', 0):3.0f}  "
            f"critic EV(pre) {m.get('critic/explained_variance_pre', math.nan):6.3f}",
            flush=True,
        )
        if midpoint is not None and trained_s >= budget_s / 2:
            midpoint()
            midpoint = None
    return history


def summarise(history: list[dict[str, float]]) -> dict[str, float]:
    def total(key: str) -> float:
        return float(sum(m.get(key, 0.0) for m in history))

    critic_s = total("time/critic_predict_s") + total("time/critic_train_s")
    update_s = critic_s + total("time/old_logprob_s") + total("time/actor_update_s")
    tail = history[-max(1, len(history) // 4) :]  # the last quarter of the run
    ev_pre = [m.get("critic/explained_variance_pre", math.nan) for m in tail]
    ev_fit = [m.get("critic/explained_variance", math.nan) for m in tail]
    steps = max(1, len(history))
    return {
        "steps": len(history),
        "actor_steps": int(total("actor/updated")),
        "ev_pre": float(np.nanmean(ev_pre)) if not np.all(np.isnan(ev_pre)) else math.nan,
        "ev_fit": float(np.nanmean(ev_fit)) if not np.all(np.isnan(ev_fit)) else math.nan,
        "critic_share": critic_s / update_s if update_s > 0 else math.nan,
        "skipped": float(np.nanmean([m.get("actor/skipped_turn_frac", math.nan) for m in history])),
        "rollout_s": total("time/rollout_s") / steps,
        "old_s": total("time/old_logprob_s") / steps,
        "update_s": total("time/actor_update_s") / steps,
        "critic_s": critic_s / steps,
        "step_s": total("time/step_s") / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=300.0, help="RL wall time each")
    parser.add_argument("--episodes", type=int, default=32, help="evaluation episodes")
    parser.add_argument("--eval-turns", type=int, default=10, help="turns per eval episode")
    parser.add_argument("--eval-envs", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=10, help="turns per RL episode")
    parser.add_argument("--trajectories", type=int, default=8, help="episodes per RL step")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--minibatch", type=int, default=16, help="PPO minibatch, in turns")
    parser.add_argument("--lr", type=float, default=3e-4, help="actor lr (constant)")
    parser.add_argument("--critic-epochs", type=int, default=1, help="Table 7: 1")
    parser.add_argument("--critic-minibatch", type=int, default=32, help="frames")
    parser.add_argument("--critic-warmup", type=int, default=2, help="critic-only RL steps")
    parser.add_argument("--warmup-steps", type=int, default=250, help="format warm-up steps")
    parser.add_argument("--warmup-lr", type=float, default=1e-3)
    parser.add_argument("--warmup-batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--estimators", default="ppo_critic_pos,grpo_outcome,reinforce_pp", help="comma list"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    from odyssey_core.models.tiny import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="learning_odland_"))
    t_start = time.perf_counter()
    base = build_tiny_model(work / "base", seed=0)
    warm, losses = format_warmup(
        base, work / "warm", args.warmup_steps, args.warmup_lr, args.warmup_batch, args.seed
    )
    t_warm = time.perf_counter() - t_start
    floor = math.log(len(MIX))  # nats per answer of a uniform choice, spread over its tokens
    print(
        f"format warm-up done in {t_warm:.0f}s: nll/token {np.mean(losses[:10]):.2f} (first 10 "
        f"steps) -> {np.mean(losses[-20:]):.3f} (last 20); a uniform choice of {len(MIX)} costs "
        f"{floor:.2f} nats per answer",
        flush=True,
    )

    eval_settings = settings_for(warm, "ppo_critic_pos", args, evaluation=True)
    t0 = time.perf_counter()
    before = evaluate(build_policy(eval_settings.model, None, work, game="odland"), eval_settings)
    t_eval = time.perf_counter() - t0
    print(describe("before RL", before) + f"  ({t_eval:.0f}s)", flush=True)

    rows = []
    for estimator in args.estimators.split(","):
        settings = settings_for(warm, estimator, args)
        trainer = build_trainer(settings, work / estimator)
        policy = trainer.policy
        print(f"{estimator}: {args.budget_s:.0f}s of RL", flush=True)
        half: dict[str, Any] = {}

        def midpoint(policy: Any = policy, half: dict[str, Any] = half) -> None:
            half.update(evaluate(policy, eval_settings))
            print("  " + describe("at half the budget", half), flush=True)

        history = train_for(trainer, args.budget_s, midpoint)
        trainer.close()
        after = evaluate(policy, eval_settings)
        print("  " + describe(f"{estimator} after", after), flush=True)
        rows.append((estimator, summarise(history), half, after))

    se_of = [math.hypot(before["se"], after["se"]) for *_, after in rows]
    print(
        f"\nodland 1-1: evaluation {args.episodes} episodes x {args.eval_turns} turns, sampled at "
        f"T=1 from seed {EVAL_SEED}; RL {args.budget_s:.0f}s each, {args.trajectories} episodes x "
        f"{args.max_turns} turns per step, lr {args.lr:g}, PPO minibatch {args.minibatch} turns"
    )
    print(
        f"before RL (warm checkpoint): {before['mean']:.1f} +- {before['se']:.1f}, "
        f"a+right {before['a_right']:.0%} of turns, valid {before['valid']:.0%}"
    )
    header = (
        f"{'estimator':15s} {'steps':>5s} {'at half':>13s} {'after':>13s} {'diff':>6s} {'z':>5s} "
        f"{'a+right':>7s} {'EV pre':>6s} {'EV fit':>6s} {'critic%':>7s} {'skip':>5s} "
        f"{'s/step':>6s} {'rollout':>7s} {'old lp':>6s} {'update':>6s}"
    )
    print(header)
    for (name, s, half, after), se in zip(rows, se_of, strict=True):
        diff = after["mean"] - before["mean"]
        z = diff / se if se > 0 else math.nan  # a constant evaluation has no spread
        print(
            f"{name:15s} {s['steps']:5d} {half['mean']:6.1f} +- {half['se']:4.1f} "
            f"{after['mean']:6.1f} +- {after['se']:4.1f} {diff:6.1f} "
            f"{z:5.1f} {after['a_right']:7.0%} {s['ev_pre']:6.3f} {s['ev_fit']:6.3f} "
            f"{s['critic_share']:7.1%} {s['skipped']:5.0%} {s['step_s']:6.1f} "
            f"{s['rollout_s']:7.1f} {s['old_s']:6.1f} {s['update_s']:6.1f}"
        )
    for (name, *_, after), se in zip(rows, se_of, strict=True):
        diff = after["mean"] - before["mean"]
        verdict = "met" if diff > 2 * se else "not met"
        print(f"{name}: after - before {diff:.1f}, 2 s.e. of the difference {2 * se:.1f}:", end=" ")
        print(f"2-s.e. target {verdict}")
    print(f"total run time {time.perf_counter() - t_start:.0f}s (warm-up {t_warm:.0f}s)")


if __name__ == "__main__":
    main()

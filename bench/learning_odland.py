"""Does RL move the tiny model on odland 1-1? A CPU benchmark (not a test).

1. Format warm-up: the tiny random Qwen3-VL is taught the answer format by a few hundred
   steps of cross-entropy on the search expert's actions on odland 1-1, written as
   ``<answer>[...]</answer>`` (odyssey_core.sft needs a curated dataset folder; this keeps the
   bench self-contained).
2. Evaluate the warm checkpoint: mean final progress +- standard error over ``--episodes``.
3. For each estimator (ppo_critic_pos, grpo_outcome, reinforce_pp): train from the warm
   checkpoint for the same wall-clock budget, evaluate again, print the three side by side
   with the critic's explained variance and its share of update time.

    .venv/bin/python bench/learning_odland.py --budget-s 60 --episodes 32 --max-turns 10
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from odyssey_core.rl.train_settings import RLTrainSettings
from odyssey_core.rl.trainer import RLTrainer, build_vector_env

LEVEL = "odland-1-1"


def expert_turns(n_turns: int, seed: int = 0) -> list[tuple[np.ndarray, str, tuple[str, ...]]]:
    """(frame, task text, expert buttons) for the first turns of odland 1-1."""
    from odyssey_core.agents.expert import SearchExpert
    from odyssey_core.envs import make_env

    env = make_env(LEVEL, max_turns=n_turns)
    agent = SearchExpert()
    observation, info = env.reset(seed=seed)
    agent.reset(env, seed=seed)
    turns = []
    for _ in range(n_turns):
        action = agent.act(env, observation, info)
        turns.append((np.array(observation.image), observation.text, tuple(action)))
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    env.close()
    return turns


def format_warmup(model_dir: Path, out_dir: Path, steps: int, lr: float = 1e-3) -> Path:
    """Cross-entropy on the expert's formatted answers; saves a checkpoint to ``out_dir``."""
    from odyssey_core.envs.base import Observation
    from odyssey_core.policy.hf import END_OF_TURN, HFPolicy
    from odyssey_core.protocol import format_response

    policy = HFPolicy(model_dir)
    turns = expert_turns(24)
    prompts, responses, frames = [], [], []
    for frame, text, buttons in turns:
        inputs, _ = policy.encode([Observation(image=frame, text=text)])
        prompts.append(inputs["input_ids"][0].tolist())
        answer = format_response(None, None, buttons) + END_OF_TURN
        responses.append(policy.tokenizer(answer, add_special_tokens=False)["input_ids"])
        frames.append(frame)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    for step in range(steps):
        pick = rng.choice(len(turns), size=4, replace=False).tolist()
        logps = policy.score(
            [prompts[i] for i in pick], [responses[i] for i in pick], [frames[i] for i in pick]
        )
        loss = -torch.cat(logps).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  warm-up step {step:4d}  nll/token {loss.item():.3f}", flush=True)
    policy.model.save_pretrained(out_dir, safe_serialization=True)
    policy.processor.save_pretrained(out_dir)
    return out_dir


def settings_for(model_dir: Path, estimator: str, args: argparse.Namespace) -> RLTrainSettings:
    return RLTrainSettings.model_validate(
        {
            "seed": args.seed,
            "steps": 10**6,
            "checkpoint_every": 10**6,
            "model": {"path": str(model_dir)},
            "levels": [LEVEL],
            "rollout": {
                "num_trajectories": args.trajectories,
                "max_turns": args.max_turns,
                "n_envs": args.n_envs,
                "generation": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16},
                "score_micro_batch": 8,
            },
            "estimator": estimator,
            "ppo": {"minibatch_size": 32, "lr": args.lr},
            "critic": {"input_height": 72, "input_width": 80, "minibatch_size": 64},
            "curriculum": {"enabled": False},
        }
    )


def evaluate(trainer: RLTrainer, episodes: int, seed: int = 12345) -> tuple[float, float]:
    """Mean final progress and its standard error over ``episodes`` sampled episodes."""
    batch, _ = trainer.collector.collect(episodes, levels=[LEVEL] * episodes, seed=seed)
    finals = [batch.extras[part.stop - 1]["progress"] for part in batch.episode_slices()]
    return float(np.mean(finals)), float(np.std(finals, ddof=1) / math.sqrt(len(finals)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=60.0, help="training wall time each")
    parser.add_argument("--episodes", type=int, default=32, help="evaluation episodes")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--trajectories", type=int, default=8, help="per training step")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=5e-5, help="Table 4's actor lr")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--estimators", default="ppo_critic_pos,grpo_outcome,reinforce_pp", help="comma list"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    from odyssey_core.models.tiny import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="learning_odland_"))
    t0 = time.perf_counter()
    base = build_tiny_model(work / "base", seed=0)
    warm = format_warmup(base, work / "warm", args.warmup_steps)
    print(f"format warm-up done in {time.perf_counter() - t0:.0f}s", flush=True)

    rows = []
    before = None
    for estimator in args.estimators.split(","):
        settings = settings_for(warm, estimator, args)
        from odyssey_core.rl.trainer import build_policy

        policy = build_policy(settings, work)
        trainer = RLTrainer(settings, policy, build_vector_env(settings), work / estimator)
        if before is None:
            before = evaluate(trainer, args.episodes)
            print(f"before RL: progress {before[0]:.1f} +- {before[1]:.1f}", flush=True)
        started, history = time.perf_counter(), []
        while time.perf_counter() - started < args.budget_s:
            history.append(trainer.train_step())
        after = evaluate(trainer, args.episodes)
        trainer.close()
        ev = [m.get("critic/explained_variance", math.nan) for m in history]
        share = [m["time/critic_share_of_update"] for m in history]
        skipped = [m.get("actor/skipped_turn_frac", math.nan) for m in history]
        rows.append(
            (
                estimator,
                len(history),
                after,
                np.nanmean(ev[-3:]),
                np.mean(share),
                np.nanmean(skipped),
            )
        )
        print(
            f"{estimator}: {len(history)} steps, after {after[0]:.1f} +- {after[1]:.1f}", flush=True
        )

    print(
        f"\nodland 1-1, {args.episodes} eval episodes x {args.max_turns} turns, "
        f"{args.budget_s:.0f}s of training each"
    )
    print(f"before RL (warm checkpoint): {before[0]:.1f} +- {before[1]:.1f}")
    print(
        f"{'estimator':16s} {'steps':>5s} {'progress after':>16s} {'critic EV':>9s} "
        f"{'critic share':>12s} {'skipped':>7s}"
    )
    for name, steps, (mean, se), ev, share, skipped in rows:
        print(
            f"{name:16s} {steps:5d} {mean:9.1f} +- {se:4.1f} {ev:9.3f} {share:12.1%} {skipped:7.1%}"
        )


if __name__ == "__main__":
    main()

"""The Odysseus paper's Section 4.2 comparisons at CPU scale, across training seeds.

Two comparisons, both on the scenario of ``configs/odysseus/compare.yaml`` (odland 1-3 from the
save state ``tall-pipe-two-walkers.state``, 80-turn episodes) and both at an equal budget of turn
samples per run:

* :func:`run_estimators` (Fig. 4a): the seven advantage estimators of
  ``configs/odysseus/estimators/``, each a fresh trainer of the real engine from the same
  format-warmed tiny model per seed.
* :func:`run_sb3` (Fig. 4b, App. D): the VLM RL run (``ppo_critic_pos``) against SB3 PPO with
  a CNN policy trained from scratch on the original (22) and engineered (8) action sets.

Every (method, seed) result is cached under ``run.work_dir/results`` as soon as it exists, so a
killed run resumes. :data:`DEFAULT` and :data:`QUICK` name every size.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from odyssey_core.fidelity import stats
from odyssey_core.fidelity.odysseus_engine import (
    EVAL_SEED,
    GENERATION,
    evaluate,
    format_warmup,
    mix_frames,
)
from odyssey_core.fidelity.report import (
    FidelityReport,
    Figure,
    Finding,
    Headroom,
    Series,
    Table,
    report_for,
)
from odyssey_core.fidelity.run import FidelityRun
from odyssey_core.recipes.odysseus.settings import RLTrainSettings, load_train_settings

PAPER = "Odysseus (Section 4.2, Figure 4, Appendices C.2 and D)"
SCENARIO = "compare"  # configs/odysseus/compare.yaml

#: The seven estimators of Fig. 4a, with the labels the report uses.
ESTIMATOR_LABELS: dict[str, str] = {
    "ppo_critic_pos": "PPO + critic + pos. filter",
    "ppo_critic": "PPO + critic",
    "grpo_outcome": "GRPO (outcome)",
    "grpo_outcome_pos": "GRPO (outcome) + pos. filter",
    "grpo_process": "GRPO (process)",
    "grpo_process_pos": "GRPO (process) + pos. filter",
    "reinforce_pp": "Reinforce++ (turn level)",
}
CRITIC_FREE = (
    "grpo_outcome",
    "grpo_outcome_pos",
    "grpo_process",
    "grpo_process_pos",
    "reinforce_pp",
)
VLM_ESTIMATOR = "ppo_critic_pos"  # Fig. 4b's VLM RL
SB3_ACTION_SETS = ("engineered", "original")


@dataclass(frozen=True)
class OdysseusSize:
    """Every size of the two comparisons; :data:`DEFAULT` and :data:`QUICK` are the two named."""

    name: str
    turn_samples: int  # the budget per run (``--budget`` replaces it)
    episodes_per_step: int  # complete episodes per RL step
    n_envs: int  # envs stepped together in an RL step
    max_turns: int  # turns per episode (the scenario's 80; quick shortens them)
    critic_warmup: int  # critic-only RL steps of the estimators that read V(o_t)
    lr: float  # actor lr (constant)
    minibatch: int  # PPO minibatch, in turns
    warmup_steps: int  # format warm-up steps
    warmup_batch: int
    warmup_lr: float
    warmup_episodes: int  # episodes played from the start state for warm-up frames
    warmup_turns: int  # turns per warm-up episode
    eval_episodes: int  # evaluation episodes per model (fixed seed, temperature 1)
    eval_envs: int
    eval_turns: int
    sb3_n_envs: int  # SB3 PPO parallel envs
    sb3_rollout: int  # SB3 PPO samples per update (Table 6: 8192; scaled to the CPU budget)
    sb3_minibatch: int


DEFAULT = OdysseusSize(
    name="default",
    turn_samples=1280,  # 4-10 RL steps (episodes end on a death); about 90 s per run on 2 cores
    episodes_per_step=4,
    n_envs=4,
    max_turns=80,
    critic_warmup=1,
    lr=3e-4,
    minibatch=16,
    warmup_steps=150,
    warmup_batch=8,
    warmup_lr=1e-3,
    warmup_episodes=6,
    warmup_turns=16,
    eval_episodes=8,
    eval_envs=8,
    eval_turns=80,
    sb3_n_envs=4,
    sb3_rollout=256,
    sb3_minibatch=64,
)
# only what quick shrinks; the learning rates and the PPO minibatch are the default's
QUICK = replace(
    DEFAULT,
    name="quick",
    turn_samples=16,  # one step of 2 x 8 turns
    episodes_per_step=2,
    n_envs=2,
    max_turns=8,
    critic_warmup=0,
    warmup_steps=4,
    warmup_batch=4,
    warmup_episodes=1,
    warmup_turns=8,
    eval_episodes=2,
    eval_envs=2,
    eval_turns=8,
    sb3_n_envs=2,
    sb3_rollout=16,
    sb3_minibatch=8,
)


def size_of(run: FidelityRun) -> OdysseusSize:
    return QUICK if run.quick else DEFAULT


def budget_of(run: FidelityRun) -> int:
    """Turn samples per run: ``--budget`` or the size's."""
    return int(run.budget_or(DEFAULT.turn_samples, QUICK.turn_samples))


# -- one VLM RL run ------------------------------------------------------------------------------


def rl_settings(
    model_dir: Path | None,
    estimator: str,
    seed: int,
    size: OdysseusSize,
    *,
    evaluation: bool = False,
) -> RLTrainSettings:
    """The estimator's preset (compare.yaml's scenario) at CPU size on the tiny model."""
    from odyssey_core.rl.advantages import ESTIMATORS

    # The critic warm-up holds the actor back; only the estimators that read V(o_t) need it.
    critic_warmup = size.critic_warmup if ESTIMATORS.get(estimator).needs_values else 0
    return load_train_settings(
        f"estimators/{estimator}",
        {
            "seed": seed,
            "steps": 10**6,
            "max_turn_samples": None,  # the loop below counts the budget
            "checkpoint_every": 10**6,
            "model": {
                "path": str(model_dir) if model_dir else None,
                "dtype": "float32",
                "device": "cpu",
                "image_scale": None,
            },
            "deepspeed": None,
            "rollout": {
                "num_trajectories": size.eval_episodes if evaluation else size.episodes_per_step,
                "max_turns": size.eval_turns if evaluation else size.max_turns,
                "n_envs": size.eval_envs if evaluation else size.n_envs,
                "vector": "sync",
                "generation": GENERATION,
                "score_micro_batch": 8,
            },
            "ppo": {"minibatch_size": size.minibatch, "lr": size.lr},
            "critic": {
                "input_height": 72,
                "input_width": 80,
                "minibatch_size": 32,
                "epochs": 1,
                "warmup_steps": critic_warmup,
            },
            "curriculum": {"enabled": False},
        },
    )


def scenario() -> tuple[str, bytes]:
    """The scenario's level and start state (read from compare.yaml)."""
    settings = load_train_settings(SCENARIO, {"deepspeed": None})
    level = settings.levels[0]
    path = settings.rollout.start_states.get(level)
    if path is None or not Path(path).is_file():
        raise FileNotFoundError(
            f"compare.yaml names no start state for {level} (or it is missing): remake it with "
            "`odyssey scenario make tall-pipe-two-walkers`"
        )
    return level, Path(path).read_bytes()


def scenario_ends() -> tuple[float, float]:
    """The scenario's floor and ceiling of progress: where its start state stands (a policy
    that stands still ends there) and the level's goal (the env's ``max_progress``)."""
    from odyssey_core.envs import make_env

    level, state = scenario()
    env = make_env(level, max_turns=1)
    try:
        _, info = env.reset(seed=EVAL_SEED, options={"state": state})
    finally:
        env.close()
    if info.get("max_progress") is None:
        raise RuntimeError(f"{level} reports no max_progress: its goal is not known")
    return float(info["progress"]), float(info["max_progress"])


def progress_headroom(metric: str, warm_start: list[float], size: OdysseusSize) -> Headroom:
    """The warm start's mean evaluation progress between the scenario's two ends."""
    floor, ceiling = scenario_ends()
    return Headroom(
        metric=metric,
        warm_start=stats.mean_se(warm_start)[0],
        floor=floor,
        ceiling=ceiling,
        label=f"{SCENARIO}.yaml scenario, {size.eval_turns}-turn evaluation episodes",
        note="floor: the start state's progress (standing still); ceiling: the level's goal",
    )


def _report(
    run: FidelityRun, name: str, title: str, data: dict[str, Any], **parts: Any
) -> FidelityReport:
    """One of the two Odysseus reports: the paper, and its run's size and budget in ``data``."""
    sizes = {"size": asdict(size_of(run)), "budget_turn_samples": budget_of(run)}
    return report_for(run, name, title=title, paper=PAPER, data=sizes | data, **parts)


def warm_checkpoint(run: FidelityRun, size: OdysseusSize, seed: int) -> Path:
    """The format-warmed tiny model of ``seed``, built once and kept in ``run.work_dir``."""
    import torch

    from odyssey_core.models.tiny import build_tiny_model

    out = run.work_dir / "warm" / f"{size.name}-seed{seed}"
    done = out / "WARM_DONE"
    if done.is_file():
        return out
    torch.manual_seed(seed)
    base = build_tiny_model(run.work_dir / "base" / f"seed{seed}", seed=seed)
    level, state = scenario()
    frames = mix_frames(level, size.warmup_episodes, size.warmup_turns, seed, state)
    run.log(f"[fidelity] format warm-up, seed {seed}: {size.warmup_steps} steps")
    format_warmup(
        base,
        out,
        size.warmup_steps,
        size.warmup_lr,
        size.warmup_batch,
        seed,
        frames=frames,
        log=run.log,
    )
    done.write_text("ok\n", encoding="utf-8")
    return out


def _eval_summary(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluation as JSON: the button counter becomes a plain dict."""
    return {**result, "buttons": dict(result["buttons"])}


def _warm_eval(run: FidelityRun, size: OdysseusSize, seed: int) -> dict[str, Any]:
    from odyssey_core.rl.policy import build_policy

    warm = warm_checkpoint(run, size, seed)
    settings = rl_settings(warm, VLM_ESTIMATOR, seed, size, evaluation=True)
    policy = build_policy(settings.model, None, run.work_dir / "eval", game="odland")
    return _eval_summary(evaluate(policy, settings, seed=EVAL_SEED))


def _train_estimator(
    run: FidelityRun, size: OdysseusSize, estimator: str, seed: int, budget: int
) -> dict[str, Any]:
    """One estimator from the seed's warm checkpoint until ``budget`` turn samples; the curve
    after every RL step and the final evaluation."""
    from odyssey_core.recipes.odysseus.train import build_trainer

    warm = warm_checkpoint(run, size, seed)
    settings = rl_settings(warm, estimator, seed, size)
    trainer = build_trainer(settings, run.work_dir / "runs" / f"{size.name}-{estimator}-s{seed}")
    curve: dict[str, list[float]] = {"turn_samples": [], "wall_s": [], "progress": []}
    skipped, wall = 0.0, 0.0
    try:
        while trainer.turn_samples < budget:
            started = time.perf_counter()
            before = trainer.turn_samples
            m = trainer.train_step()
            wall += time.perf_counter() - started
            turns = trainer.turn_samples - before
            if m.get("actor/updated"):
                skipped += m.get("actor/skipped_turn_frac", 0.0) * turns
            curve["turn_samples"].append(float(trainer.turn_samples))
            curve["wall_s"].append(wall)
            curve["progress"].append(float(m["all/progress_mean"]))
            run.log(
                f"[fidelity] {estimator} seed {seed}: step {trainer.step}, "
                f"{trainer.turn_samples}/{budget} turns, progress {curve['progress'][-1]:.1f}"
            )
        eval_settings = rl_settings(warm, estimator, seed, size, evaluation=True)
        final = _eval_summary(evaluate(trainer.policy, eval_settings, seed=EVAL_SEED))
    finally:
        trainer.close()
    return {
        "estimator": estimator,
        "seed": seed,
        "steps": trainer.step,
        "curve": curve,
        "skipped_turns": skipped,
        "final": final,
    }


def _key(kind: str, seed: int, budget: int | None, size: OdysseusSize) -> str:
    tail = f"-budget{budget}" if budget is not None else ""
    return f"{kind}-seed{seed}{tail}-{size.name}"


def vlm_result(run: FidelityRun, estimator: str, seed: int, budget: int) -> dict[str, Any]:
    """The cached (estimator, seed) run of the estimators comparison."""
    size = size_of(run)
    return run.cached(
        _key(f"estimator-{estimator}", seed, budget, size),
        lambda: _train_estimator(run, size, estimator, seed, budget),
    )


def warm_result(run: FidelityRun, seed: int) -> dict[str, Any]:
    size = size_of(run)
    return run.cached(_key("warm-eval", seed, None, size), lambda: _warm_eval(run, size, seed))


# -- reading the runs ----------------------------------------------------------------------------


def equal_wall_values(
    curves: dict[str, list[tuple[list[float], list[float]]]],
) -> tuple[float, dict[str, list[float]]]:
    """The curves read at equal wall clock: the shortest total wall time over every run of
    every method, and each run's EMA-smoothed value there (one value per seed and method).

    ``curves`` maps a method to its per-seed ``(wall seconds, value)`` curves."""
    ends = [wall[-1] for runs in curves.values() for wall, _ in runs if len(wall)]
    if not ends:
        return math.nan, {name: [] for name in curves}
    at = min(ends)
    values = {
        name: [stats.value_at(wall, stats.ema(y), at) for wall, y in runs if len(wall)]
        for name, runs in curves.items()
    }
    return at, values


def bucket_episodes(
    lengths: list[int], values: list[float], times: list[float], every: int
) -> dict[str, list[float]]:
    """Per-episode results (one row per finished episode, in order) grouped into windows of
    ``every`` turn samples, the way an RL step groups its episodes: for each window that had
    episodes end in it, the cumulative turn samples at its end, the time of its last episode
    and the mean value of its episodes."""
    out: dict[str, list[float]] = {"turn_samples": [], "wall_s": [], "progress": []}
    total, group, last_t = 0, [], 0.0
    boundary = every
    for length, value, t in zip(lengths, values, times, strict=True):
        total += int(length)
        group.append(float(value))
        last_t = float(t)
        if total >= boundary:
            out["turn_samples"].append(float(total))
            out["wall_s"].append(last_t)
            out["progress"].append(float(np.mean(group)))
            group = []
            while boundary <= total:
                boundary += every
    if group:
        out["turn_samples"].append(float(total))
        out["wall_s"].append(last_t)
        out["progress"].append(float(np.mean(group)))
    return out


def _band_figure(
    name: str, title: str, xlabel: str, runs: dict[str, list[dict[str, list[float]]]], x: str
) -> Figure:
    series = []
    for label, curves in runs.items():
        band = stats.seed_band([(c[x], c["progress"]) for c in curves])
        series.append(Series.of(f"{label} (n={band.seeds})", band))
    return Figure(name, title, xlabel, "training progress (EMA 0.85)", series)


# -- comparison 1: the seven estimators ----------------------------------------------------------


def run_estimators(run: FidelityRun) -> FidelityReport:
    """Fig. 4a at CPU scale: seven estimators, equal turn-sample budget, seeds, error bars."""
    size, budget, seeds = size_of(run), budget_of(run), run.seed_list()
    warm = {seed: warm_result(run, seed) for seed in seeds}
    results = {
        est: [vlm_result(run, est, seed, budget) for seed in seeds] for est in ESTIMATOR_LABELS
    }
    before = [warm[s]["mean"] for s in seeds]
    final = {est: [r["final"]["mean"] for r in rs] for est, rs in results.items()}
    at, at_wall = equal_wall_values(
        {
            est: [(r["curve"]["wall_s"], r["curve"]["progress"]) for r in rs]
            for est, rs in results.items()
        }
    )

    label = ESTIMATOR_LABELS
    findings = []
    test = stats.ordering(
        label["ppo_critic_pos"], final["ppo_critic_pos"], label["ppo_critic"],
        final["ppo_critic"], ">=",
    )  # fmt: skip
    findings.append(
        Finding(
            f"{label['ppo_critic_pos']} >= {label['ppo_critic']}",
            "Odysseus Sec. 4.2, Fig. 4a",
            test.measurement(),
            test.verdict,
            "Final evaluation progress per seed; the paper's claim is about stability, which "
            "a few seeds at this size can only approach through the final score.",
        )
    )
    for est in CRITIC_FREE:
        test = stats.ordering(label["ppo_critic"], final["ppo_critic"], label[est], final[est])
        findings.append(
            Finding(
                f"{label['ppo_critic']} > {label[est]}",
                "Odysseus Sec. 4.2, Fig. 4a",
                test.measurement(),
                test.verdict,
            )
        )
    test = stats.improves(label["grpo_outcome"], before, final["grpo_outcome"])
    findings.append(
        Finding(
            f"{label['grpo_outcome']} improves on the warm start",
            "Odysseus Sec. 4.2",
            test.measurement(),
            test.verdict,
            "Per-seed final evaluation against the same seed's warm checkpoint.",
        )
    )
    others = [e for e in CRITIC_FREE if e != "grpo_outcome"]
    parts = [stats.ordering(f"{label[e]} before", before, "after", final[e], ">=") for e in others]
    findings.append(
        Finding(
            "the other critic-free methods do not improve on the warm start",
            "Odysseus Sec. 4.2",
            "; ".join(f"{p.a} vs after: {p.measurement()} -> {p.verdict.value}" for p in parts),
            stats.combine([p.verdict for p in parts]),
            "Each part is 'before >= after'; it fails when a method's final score is "
            "significantly above its warm start.",
        )
    )

    rows = []
    for est, rs in results.items():
        rows.append(
            [
                label[est],
                float(np.mean([r["steps"] for r in rs])),
                float(np.mean([r["curve"]["turn_samples"][-1] for r in rs])),
                float(np.mean([r["curve"]["wall_s"][-1] for r in rs])),
                stats.format_mean_se(final[est], 1),
                stats.format_mean_se(at_wall[est], 1),
                float(np.mean([r["skipped_turns"] for r in rs])),
            ]
        )
    table = Table(
        "Per estimator (means over seeds)",
        [
            "estimator",
            "RL steps",
            "turn samples",
            "RL wall s",
            "final eval progress",
            f"training progress at {at:.0f} s",
            "turns skipped by filtering",
        ],
        rows,
    )
    curves = {label[est]: [r["curve"] for r in rs] for est, rs in results.items()}
    figures = [
        _band_figure(
            "estimators_vs_turns", "Training progress vs turn samples (Fig. 4a)",
            "turn samples", curves, "turn_samples",
        ),
        _band_figure(
            "estimators_vs_wall", "Training progress vs wall clock of RL steps",
            "seconds of RL steps", curves, "wall_s",
        ),
    ]  # fmt: skip
    setup = [
        f"Scenario: configs/odysseus/compare.yaml (odland 1-3 from tall-pipe-two-walkers.state), "
        f"episodes of {size.max_turns} turns"
        + (" (quick shortens the scenario's 80-turn episodes)" if run.quick else "")
        + "; estimator presets configs/odysseus/estimators/*.yaml on the real trainer.",
        f"Model: the tiny random Qwen3-VL (odyssey_core.models.tiny, seed = training seed), "
        f"format-warmed for {size.warmup_steps} steps on frames played from the start state.",
        f"Budget: {budget} turn samples per run ({size.episodes_per_step} episodes x up to "
        f"{size.max_turns} turns per RL step, {size.n_envs} envs), lr {size.lr:g}, PPO "
        f"minibatch {size.minibatch} turns, critic warm-up {size.critic_warmup} step(s) for the "
        "critic estimators (inside the budget).",
        f"Evaluation: {size.eval_episodes} episodes of {size.eval_turns} turns from the start "
        f"state, sampled at temperature 1 from env seed {EVAL_SEED}; score = progress at the "
        "last turn.",
        f"Seeds: {len(seeds)} ({seeds}); curves EMA 0.85, bands = s.e. across seeds.",
        f"Warm start evaluation: {stats.format_mean_se(before, 1)}.",
    ]
    caveats = [
        "The paper trains Qwen3-VL-8B for 0.38M turn samples; this trains a tiny random model "
        f"for {budget} turn samples per run. A ranking here says which estimator moves a "
        "policy with no priors in a few steps, not which one scales.",
        f"Each verdict rests on {len(seeds)} seed(s) of {budget} turn samples per method; more "
        "seeds (--seeds) and a larger --budget are what give a test more power.",
        "Wall clock is of RL steps only on a shared CPU; the critic's cost share differs on GPUs.",
    ]
    return _report(
        run,
        "odysseus-estimators",
        "Odysseus Fig. 4a at CPU scale: seven advantage estimators",
        {"warm": warm, "results": results, "equal_wall_s": at},
        setup=setup,
        findings=findings,
        tables=[table],
        figures=figures,
        caveats=caveats,
        headroom=[progress_headroom("final evaluation progress", before, size)],
    )


# -- comparison 2: VLM RL vs SB3 PPO -------------------------------------------------------------


def _estimators_sibling(run: FidelityRun) -> FidelityRun | None:
    """The estimators comparison's cache when it sits beside this one
    (``OUT/odysseus-estimators/work`` next to ``OUT/odysseus-sb3/work``)."""
    folder = run.work_dir.parent.parent / "odysseus-estimators" / "work"
    if not (folder / "results").is_dir() or folder.resolve() == run.work_dir.resolve():
        return None
    return FidelityRun(
        out_dir=folder.parent,
        work_dir=folder,
        seeds=run.seeds,
        budget=run.budget,
        quick=run.quick,
        log=run.log,
    )


def _from_estimators(
    run: FidelityRun, key: str, compute: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """A result of the estimators comparison: read from its cache when it sits beside this one,
    else computed (and cached) under this comparison's work_dir."""
    sibling = _estimators_sibling(run)
    if sibling is not None and sibling.cache_path(key).is_file():
        run.cache_hits += 1
        return sibling.cached(key, dict)  # read back: the cache file exists
    return run.cached(key, compute)


def _vlm_for_sb3(run: FidelityRun, seed: int, budget: int) -> dict[str, Any]:
    """The ppo_critic_pos run of ``seed``."""
    size = size_of(run)
    return _from_estimators(
        run,
        _key(f"estimator-{VLM_ESTIMATOR}", seed, budget, size),
        lambda: _train_estimator(run, size, VLM_ESTIMATOR, seed, budget),
    )


def _warm_for_sb3(run: FidelityRun, seed: int) -> dict[str, Any]:
    """The evaluation of ``seed``'s format-warmed model, before any RL."""
    size = size_of(run)
    return _from_estimators(
        run, _key("warm-eval", seed, None, size), lambda: _warm_eval(run, size, seed)
    )


def _read_monitor(path: Path) -> dict[str, list[float]]:
    lengths, progress, times = [], [], []
    with path.open(newline="") as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        for row in rows:
            lengths.append(int(float(row["l"])))
            progress.append(float(row["progress"]))
            times.append(float(row["t"]))
    return {"l": lengths, "progress": progress, "t": times}


def _train_sb3(
    run: FidelityRun, size: OdysseusSize, action_set: str, seed: int, budget: int
) -> dict[str, Any]:
    """SB3 PPO (App. D, Table 6 but for the rollout size) on compare.yaml's task for ``budget``
    samples; the training curve grouped like the VLM's RL steps and the final evaluation."""
    from stable_baselines3 import PPO

    from odyssey_core.baselines.sb3_ppo import (
        MONITOR_FILE,
        evaluate_model,
        load_sb3_ppo_settings,
        train_sb3_ppo,
    )

    settings = load_sb3_ppo_settings(
        "sb3_ppo",
        {
            "total_timesteps": budget,
            "n_envs": size.sb3_n_envs,
            "vec_env": "dummy",
            "seed": seed,
            "device": "cpu",
            "torch_threads": 1,
            "env": {"action_space": action_set, "game": {"max_turns": size.max_turns}},
            "ppo": {"rollout_size": size.sb3_rollout, "minibatch_size": size.sb3_minibatch},
            "eval": {"every": 0, "episodes": size.eval_episodes, "n_envs": size.eval_envs},
        },
    )
    out = run.work_dir / "sb3" / f"{size.name}-{action_set}-s{seed}"
    started = time.perf_counter()
    model_path = train_sb3_ppo(settings, out)
    wall = time.perf_counter() - started
    monitor = _read_monitor(out / MONITOR_FILE)
    curve = bucket_episodes(
        monitor["l"], monitor["progress"], monitor["t"], size.episodes_per_step * size.max_turns
    )
    eval_env = settings.env.model_copy(
        update={"game": settings.env.game.model_copy(update={"max_turns": size.eval_turns})}
    )
    model = PPO.load(str(model_path), device="cpu")
    results = evaluate_model(
        model,
        settings.levels,
        size.eval_episodes,
        eval_env,
        n_envs=size.eval_envs,
        deterministic=False,
        seed=EVAL_SEED,
        start_states=settings.start_states,
    )
    level = settings.levels[0]
    return {
        "action_set": action_set,
        "seed": seed,
        "wall_s": wall,
        "curve": curve,
        "final": {"best_mean": results[level].mean, "best_se": results[level].stderr},
    }


def sb3_result(run: FidelityRun, action_set: str, seed: int, budget: int) -> dict[str, Any]:
    size = size_of(run)
    return run.cached(
        _key(f"sb3-{action_set}", seed, budget, size),
        lambda: _train_sb3(run, size, action_set, seed, budget),
    )


def run_sb3(run: FidelityRun) -> FidelityReport:
    """Fig. 4b at CPU scale: VLM RL (ppo_critic_pos) vs SB3 PPO (CNN) on both action sets."""
    size, budget, seeds = size_of(run), budget_of(run), run.seed_list()
    vlm = [_vlm_for_sb3(run, seed, budget) for seed in seeds]
    warm = [_warm_for_sb3(run, seed) for seed in seeds]
    sb3 = {a: [sb3_result(run, a, seed, budget) for seed in seeds] for a in SB3_ACTION_SETS}
    labels = {
        "vlm": "VLM RL (PPO + critic + pos. filter)",
        "engineered": "SB3 PPO (engineered, 8 actions)",
        "original": "SB3 PPO (original, 22 actions)",
    }
    score = {
        "vlm": [r["final"]["best_mean"] for r in vlm],
        **{a: [r["final"]["best_mean"] for r in rs] for a, rs in sb3.items()},
    }
    findings = []
    for a in ("engineered", "original"):
        test = stats.ordering(labels["vlm"], score["vlm"], labels[a], score[a])
        findings.append(
            Finding(
                f"VLM RL > SB3 PPO ({a} actions)",
                "Odysseus Sec. 5, Fig. 4b",
                test.measurement(),
                test.verdict,
                "The paper's claim is sample efficiency (about 2x fewer samples); at an equal "
                "turn-sample budget we compare the final evaluation (best progress per episode).",
            )
        )
    test = stats.ordering(labels["engineered"], score["engineered"], labels["original"],
                          score["original"])  # fmt: skip
    findings.append(
        Finding(
            "SB3 PPO: engineered actions > original actions",
            "Odysseus Sec. 5, Fig. 4b",
            test.measurement(),
            test.verdict,
        )
    )
    curves = {
        labels["vlm"]: [r["curve"] for r in vlm],
        **{labels[a]: [r["curve"] for r in rs] for a, rs in sb3.items()},
    }
    rows = [
        [
            labels[k],
            float(np.mean([c["turn_samples"][-1] for c in curves[labels[k]]])),
            float(np.mean([c["wall_s"][-1] for c in curves[labels[k]]])),
            stats.format_mean_se(score[k], 1),
        ]
        for k in ("vlm", "engineered", "original")
    ]
    warm_best = [w["best_mean"] for w in warm]
    rows.append(["VLM warm start (before RL)", 0.0, 0.0, stats.format_mean_se(warm_best, 1)])
    table = Table(
        "Per method (means over seeds)",
        ["method", "turn samples", "training wall s", "final eval best progress"],
        rows,
    )
    figures = [
        _band_figure(
            "sb3_vs_turns", "Training progress vs turn samples (Fig. 4b)", "turn samples",
            curves, "turn_samples",
        )
    ]  # fmt: skip
    setup = [
        f"Scenario: configs/odysseus/compare.yaml (odland 1-3 from its save state), episodes of "
        f"{size.max_turns} turns" + (" (quick shortens them)" if run.quick else "") + ".",
        f"VLM RL: the ppo_critic_pos run of the estimators comparison ({budget} turn samples, "
        "the tiny format-warmed model), read from OUT/odysseus-estimators/work when that cache "
        "holds it, else trained here.",
        f"SB3 PPO: configs/baselines/sb3_ppo.yaml (Table 6) with {size.sb3_n_envs} envs, "
        f"{size.sb3_rollout} samples per update (Table 6: 8192, more than the whole budget here) "
        f"and minibatch {size.sb3_minibatch}, for {budget} samples = turns.",
        f"Evaluation: {size.eval_episodes} sampled episodes of {size.eval_turns} turns from the "
        f"start state (env seed {EVAL_SEED}); score = the best progress of an episode (what "
        "the baseline's evaluation reports). Training curves: progress at each episode's end, "
        f"grouped per {size.episodes_per_step * size.max_turns} samples for SB3.",
        f"Seeds: {len(seeds)} ({seeds}); curves EMA 0.85, bands = s.e. across seeds.",
    ]
    caveats = [
        "The paper's claim rests on a pretrained VLM's priors (it knows what a platformer's "
        "'right' and 'jump' are); the tiny model here is random and only format-warmed over the "
        "expert's eight actions, so it has a prior over a good action subset but no visual "
        "understanding. This comparison cannot test the role of pretraining; it checks that "
        "both pipelines run the same task at the same budget and reports what they reach.",
        f"{budget} samples is a tiny fraction of the paper's 0.38M-2M. The two sides start "
        "differently: SB3's CNN from scratch with uniform actions, the VLM from a format warm-up "
        "over the expert's actions; at a budget this small the start counts for much of the "
        "final score, so the warm start's evaluation is given beside the VLM's.",
    ]
    return _report(
        run,
        "odysseus-sb3",
        "Odysseus Fig. 4b at CPU scale: VLM RL vs SB3 PPO",
        {"vlm": vlm, "warm": warm, "sb3": sb3},
        setup=setup,
        findings=findings,
        tables=[table],
        figures=figures,
        caveats=caveats,
        headroom=[progress_headroom("VLM's best evaluation progress", warm_best, size)],
    )

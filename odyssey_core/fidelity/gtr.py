"""GTR's card-game comparison at CPU scale: RL4VLM vs GTR vs SFT-only, over training seeds.

The paper (GTR Table 1, Fig. 5 and 6) trains LLaVA-7b on gym_cards and reports that GTR, PPO
plus cloning of a corrector's thoughts, beats RL4VLM (PPO on env rewards only) and SFT-only
(the cloning without PPO), and that RL4VLM's thoughts collapse (lose their diversity) while
GTR's do not. Here, per env and training seed:

1. A format warm-up (cached): GTR with PPO off and ``sft.target: full_response``, cloning the
   exact programmatic corrector's whole answers, so that the random tiny model writes answers
   an env can parse (the paper starts from LLaVA-sft for the same reason). It is evaluated on
   the final models' deals: the report's headroom puts it between random legal play (what a
   model whose answers never parse gets) and 1. The games are played in the variants of
   ``DEFAULT_SIZES.variants``: the registered rules at a size the tiny model can read.
2. From that checkpoint each method trains for the same number of RL steps (``--budget``):
   ``configs/gtr/ablations/rl_only.yaml`` (RL4VLM), ``gtr.yaml`` (GTR) and ``sft_only.yaml``
   (SFT-only), laid under ``configs/gtr/tiny.yaml``'s CPU sizes. GTR and SFT-only use the
   ``noisy_programmatic`` corrector (the oracle with a share of wrong corrections, a stand-in
   for a VLM's mistakes); GTR with the ``openai`` corrector joins when a server is configured.
   Every step records the training rollouts' success, task return and thought-collapse metrics.
3. Each final model plays the same fixed deals: success rate per seed.

``bench/gtr_cards.py`` (a timing benchmark) shares the settings, evaluation and training
helpers defined here.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from odyssey_core.config import config_dir, deep_merge
from odyssey_core.eval.stats import wilson_interval
from odyssey_core.fidelity.checkpoint_runs import CheckpointRun
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
from odyssey_core.fidelity.stats import combine, format_mean_se, mean_se, ordering, seed_band
from odyssey_core.recipes.gtr.corrector import (
    CorrectorConfigError,
    build_corrector,
    check_corrector,
    describe_corrector,
)
from odyssey_core.recipes.gtr.evaluation import GTREvaluation, evaluate_gtr_policy
from odyssey_core.recipes.gtr.settings import GTRSettings, load_gtr_settings
from odyssey_core.rl.trainer import Trainer, TrainerHook
from odyssey_core.rollout.batch import TurnBatch

__all__ = [
    "COLLAPSE_KEYS",
    "EVAL_SEED",
    "MAX_NEW_TOKENS",
    "GTRSizes",
    "TaskOutcome",
    "evaluate",
    "gtr_settings",
    "over_training",
    "run_gtr",
    "tiny_overlay",
    "train_for",
]

EVAL_SEED = 2**40  # far from every training deal (training seeds are seed * 1000003 + k)
COLLAPSE_KEYS = (
    "valid_rate",
    "distinct_1",
    "distinct_2",
    "duplicate_share",
    "agreement",
    "thought_tokens",
)
MAX_NEW_TOKENS = {"cards-numberline": 80, "cards-ezpoints": 128, "cards-points24": 160}
ENVS = ("cards-numberline", "cards-ezpoints", "cards-points24")
ABLATIONS = config_dir() / "gtr" / "ablations"
log = logging.getLogger(__name__)


# ----------------------------------------------------------------------- shared with the bench
def tiny_overlay() -> dict[str, Any]:
    """configs/gtr/tiny.yaml's own keys: the CPU sizes, laid over an ablation preset."""
    data = yaml.safe_load((config_dir() / "gtr" / "tiny.yaml").read_text())
    data.pop("inherit", None)
    return data


def gtr_settings(
    preset: Path,
    env: str,
    model: Path,
    *,
    seed: int,
    lr: float,
    max_steps: int,
    turns_per_step: int,
    max_new_tokens: int | None = None,
    corrector: str | None = None,
    corrector_kwargs: Mapping[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> GTRSettings:
    """An ablation preset under tiny.yaml's sizes, with a constant learning rate; ``corrector``
    None keeps the one the merged presets name (tiny.yaml's programmatic oracle)."""
    rollout: dict[str, Any] = {
        "env": env,
        "env_kwargs": {**(env_kwargs or {}), "max_steps": max_steps},
        "n_envs": 4,
        "turns_per_step": turns_per_step,
        "generation": {"max_new_tokens": max_new_tokens or MAX_NEW_TOKENS[env]},
    }
    if corrector is not None:
        rollout["corrector"] = corrector
        rollout["corrector_kwargs"] = dict(corrector_kwargs or {})
    overrides = deep_merge(
        tiny_overlay(),
        {
            "seed": seed,
            "model": {"path": str(model)},
            "rollout": rollout,
            "ppo": {
                "lr": lr,
                "final_lr": lr,
                "lr_steps": 1_000_000,
                "minibatch_size": turns_per_step,
            },
            "sft": {"batch_size": 4},
        },
    )
    if corrector is not None:  # tiny.yaml's corrector_kwargs must not leak into another's
        overrides["rollout"]["corrector_kwargs"] = dict(corrector_kwargs or {})
    return load_gtr_settings(preset, overrides)


def evaluate(trainer: Trainer, episodes: int, n_envs: int = 8) -> GTREvaluation:
    """The trainer's policy on ``episodes`` fixed deals (EVAL_SEED + k), sampling as in training."""
    s = GTRSettings.model_validate(trainer.config.config_dump)
    return evaluate_gtr_policy(
        trainer.policy,
        s.rollout.env,
        episodes=episodes,
        seed=EVAL_SEED,
        generation=s.rollout.generation,
        env_kwargs=s.rollout.env_kwargs,
        n_envs=n_envs,
    )


def train_for(
    trainers: dict[str, Trainer], *, seconds: float | None = None, steps: int | None = None
) -> dict[str, dict[str, Any]]:
    """Interleave one step of each trainer until each has used ``seconds`` of step time or made
    ``steps`` steps (exactly one of the two), so CPU noise hits every trainer alike."""
    if (seconds is None) == (steps is None):
        raise ValueError("give train_for either seconds or steps")
    spent = dict.fromkeys(trainers, 0.0)
    history: dict[str, list[dict[str, float]]] = {name: [] for name in trainers}

    def more(name: str) -> bool:
        return spent[name] < seconds if seconds is not None else len(history[name]) < steps

    while any(more(n) for n in trainers):
        for name, trainer in trainers.items():
            if not more(name):
                continue
            started = time.perf_counter()
            history[name].append(trainer.train_step())
            spent[name] += time.perf_counter() - started
    return {n: {"history": history[n], "seconds": spent[n]} for n in trainers}


def over_training(history: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Collapse metrics of the training rollouts: mean over the first and last fifth of steps."""
    return {
        key: first_and_last_fifth([h.get(f"collapse/{key}", math.nan) for h in history])
        for key in COLLAPSE_KEYS
    }


class TaskOutcome(TrainerHook):
    """The training rollouts' task outcome without GTR's format bonus: the share of finished
    episodes the env scored a win (a positive final env reward on termination) and their mean
    env return, so RL4VLM (no format reward) and GTR are measured alike."""

    name = "task_outcome"

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        env_rewards = np.asarray(
            [
                float(r) - float(e.get("format_reward", 0.0))
                for r, e in zip(batch.rewards, batch.extras, strict=True)
            ]
        )
        wins, returns = [], []
        for part in batch.episode_slices():
            last = part.stop - 1
            if bool(batch.terminated[last]) or batch.extras[last].get("truncated"):
                wins.append(float(bool(batch.terminated[last]) and env_rewards[last] > 0))
                returns.append(float(env_rewards[part].sum()))
        if not wins:
            return {}
        return {"task/success": float(np.mean(wins)), "task/return": float(np.mean(returns))}


# ------------------------------------------------------------------------------- the comparison
@dataclass(frozen=True)
class GTRSizes:
    """Every size of the comparison; ``steps`` is RL steps per run (``--budget`` overrides)."""

    envs: tuple[str, ...]
    steps: int  # RL steps per (env, method, seed)
    warmup_steps: int  # format warm-up steps per (env, seed)
    episodes: int  # evaluation deals per final model
    turns_per_step: int
    max_steps: int  # turns per episode
    max_new_tokens: int | None  # None: MAX_NEW_TOKENS per env
    lr: float = 1e-4  # configs/gtr/tiny.yaml's, constant
    warmup_lr: float = 1e-3
    error_rate: float = 0.2  # the noisy corrector's share of wrong corrections
    # per env, the variant played (its env kwargs besides max_steps); see DEFAULT_SIZES
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def env_kwargs(self, env: str) -> dict[str, Any]:
        """The kwargs ``env`` is made with in this comparison: its variant and ``max_steps``."""
        return {**self.variants.get(env, {}), "max_steps": self.max_steps}

    def tag(self, env: str) -> str:
        """What a cached result of ``env`` depends on beyond method and seed: the variant and
        the warm-up it starts from."""
        variant = "".join(
            f"-{k}{'_'.join(map(str, v)) if isinstance(v, list | tuple) else v}"
            for k, v in sorted(self.variants.get(env, {}).items())
        )
        return f"{variant}-warm{self.warmup_steps}-eval{self.episodes}"


# The variants the tiny model can read at its 96 x 64 frames (two rows of three merged visual
# tokens): Numberline's two numbers each drawn large in its own third of the frame (layout
# "panels"; in gym_cards' caption lines, even at 72 points, the warm-up learned the answer
# format but not to read the numbers: success 0.33-0.58 over 45-300 steps, random play's 0.50,
# bench/RESULTS.md), and EZPoints dealt from five ranks whose pairs make 12 (2 + 10, 4 + 8,
# 6 + 6), the rules and rewards unchanged.
NUMBERLINE_LAYOUT = "panels"
EZPOINTS_RANKS = ("2", "4", "6", "8", "10")
VARIANTS_WHY = (
    "Numberline's target and current number are each drawn large in their own third of the "
    "frame, so that the policy's 96 x 64 frames (six merged visual tokens) give each number "
    f"tokens of its own; EZPoints deals only the ranks {', '.join(EZPOINTS_RANKS)} (pairs "
    "2 + 10, 4 + 8 and 6 + 6 make 12)."
)
# Points24 is left out of the default size: no warm-up this CPU can afford solves a deal (every
# model of the 30-step run, bench/RESULTS.md, solved 0 of 48), so its findings could decide
# nothing; `--comparison gtr` with GTRSizes(envs=ENVS, ...) still runs it. The warm-ups get 180
# steps. On the panels layout Numberline's warm-up reads the numbers only after a while: at 120
# steps the 3-seed run's warm-ups solved 14, 12 and 11 of 24 evaluation deals (0.51, flagged
# near random play's 0.50); at 180 the 5-seed run's solved 82 of 120 (0.68, 37% of the range;
# bench/RESULTS.md). 20 RL steps follow, and 24 deals per model make the success estimate finer.
DEFAULT_SIZES = GTRSizes(
    envs=("cards-numberline", "cards-ezpoints"),
    steps=20,
    warmup_steps=180,
    episodes=24,
    turns_per_step=8,
    max_steps=6,
    max_new_tokens=None,
    variants={
        "cards-numberline": {"layout": NUMBERLINE_LAYOUT},
        "cards-ezpoints": {"ranks": list(EZPOINTS_RANKS)},
    },
)
QUICK_SIZES = GTRSizes(
    envs=("cards-numberline",),
    steps=1,
    warmup_steps=1,
    episodes=2,
    turns_per_step=2,
    max_steps=2,
    max_new_tokens=16,
)

OPENAI_KWARGS_ENV = {  # the paper's corrector, as configs/gtr/points24.yaml names it
    "model": "gpt-4o",
    "model_env": "GTR_CORRECTOR_MODEL",
    "base_url": None,
    "base_url_env": "GTR_CORRECTOR_BASE_URL",
    "api_key_env": "OPENAI_API_KEY",
}


@dataclass(frozen=True)
class Method:
    name: str
    preset: str
    corrector: str
    corrector_kwargs: dict[str, Any]


def methods(sizes: GTRSizes, seed: int, environ: Mapping[str, str]) -> tuple[list[Method], str]:
    """The methods to train and a line on the openai corrector (used or why it is skipped)."""
    noisy = {"error_rate": sizes.error_rate, "seed": seed}
    out = [
        Method("RL4VLM", "rl_only", "none", {}),
        Method("GTR", "gtr", "noisy_programmatic", noisy),
        Method("SFT-only", "sft_only", "noisy_programmatic", noisy),
    ]
    try:
        check_corrector("openai", OPENAI_KWARGS_ENV, environ=environ)
    except CorrectorConfigError as err:
        return out, f"GTR with the openai corrector: skipped, no server is configured ({err})"
    out.append(Method("GTR (openai)", "gtr", "openai", OPENAI_KWARGS_ENV))
    return out, "GTR with the openai corrector: trained, on the server GTR_CORRECTOR_BASE_URL names"


def _base_model(run: FidelityRun) -> Path:
    from odyssey_core.models.tiny import ensure_tiny_model

    return ensure_tiny_model(run.work_dir / "tiny-base", seed=0)


def _curve(history: list[dict[str, float]]) -> dict[str, list[float]]:
    keys = {"success": "task/success", "return": "task/return"}
    keys.update({k: f"collapse/{k}" for k in COLLAPSE_KEYS})
    out: dict[str, list[float]] = {"step": [float(i + 1) for i in range(len(history))]}
    for name, key in keys.items():
        out[name] = [float(h.get(key, math.nan)) for h in history]
    return out


def sized_settings(
    preset: str, env: str, model: Path, seed: int, sizes: GTRSizes, lr: float, method: Method
) -> GTRSettings:
    """:func:`gtr_settings` of one run of the comparison: its preset and corrector at
    ``sizes``' rollout sizes."""
    return gtr_settings(
        ABLATIONS / f"{preset}.yaml",
        env,
        model,
        seed=seed,
        lr=lr,
        max_steps=sizes.max_steps,
        turns_per_step=sizes.turns_per_step,
        max_new_tokens=sizes.max_new_tokens,
        corrector=method.corrector,
        corrector_kwargs=method.corrector_kwargs,
        env_kwargs=sizes.variants.get(env),
    )


#: the format warm-up: SFT-only's cloning (PPO off) of the exact corrector's whole answers
WARM_UP = Method("warm-up", "sft_only", "programmatic", {})


def warm_up_settings(env: str, model: Path, seed: int, sizes: GTRSizes) -> GTRSettings:
    """The format warm-up's settings: :data:`WARM_UP` at ``sizes``' warm-up learning rate,
    cloning the whole answer (thought and action), not the thought alone."""
    settings = sized_settings(WARM_UP.preset, env, model, seed, sizes, sizes.warmup_lr, WARM_UP)
    return settings.model_copy(
        update={"sft": settings.sft.model_copy(update={"target": "full_response"})}
    )


@dataclass(frozen=True)
class WarmStart:
    """The format warm-up of one (env, seed): its policy folder and its evaluation on the
    comparison's fixed deals (what every method starts from, before any RL)."""

    policy_dir: Path
    successes: list[bool]
    summary: dict[str, float]

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes)) if self.successes else math.nan


def _warm_start(run: FidelityRun, env: str, seed: int, sizes: GTRSizes, quick: bool) -> WarmStart:
    """The format warm-up for (env, seed), trained and evaluated once and cached."""
    from odyssey_core.recipes.gtr.train import build_trainer
    from odyssey_core.rl.checkpoint import policy_dir

    key = f"gtr-warm-{env}-seed{seed}{sizes.tag(env)}-quick{int(quick)}"
    out = run.work_dir / "warm" / key

    def compute() -> dict[str, Any]:
        trainer = build_trainer(warm_up_settings(env, _base_model(run), seed, sizes), out)
        try:
            train_for({"warm": trainer}, steps=sizes.warmup_steps)
            folder = policy_dir(trainer.save())
            evaluation = evaluate(trainer, sizes.episodes)
        finally:
            trainer.close()
        return {
            "policy_dir": str(folder),
            "successes": [bool(x) for x in evaluation.successes],
            "summary": {k: float(v) for k, v in evaluation.summary().items()},
        }

    result = run.cached(key, compute)
    folder = Path(result["policy_dir"])
    if not folder.is_dir():
        raise FileNotFoundError(
            f"the cached warm-up {key} points at {folder}, which is gone: delete "
            f"{run.cache_path(key)} to train it again"
        )
    return WarmStart(folder, list(result["successes"]), dict(result["summary"]))


def train_and_evaluate(
    run: FidelityRun, env: str, method: Method, seed: int, start: Path, sizes: GTRSizes, steps: int
) -> dict[str, Any]:
    """One (env, method, seed): train ``steps`` RL steps from ``start``, evaluate on fixed deals."""
    from odyssey_core.recipes.gtr.train import build_trainer

    settings = sized_settings(method.preset, env, start, seed, sizes, sizes.lr, method)
    folder = run.work_dir / "runs" / env / method.name.replace(" ", "_") / f"seed{seed}"
    corrector = build_corrector(method.corrector, method.corrector_kwargs)
    trainer = build_trainer(settings, folder, corrector=corrector)
    trainer.hooks.append(TaskOutcome())
    try:
        trained = train_for({method.name: trainer}, steps=steps)[method.name]
        evaluation = evaluate(trainer, sizes.episodes)
    finally:
        trainer.close()
    summary = evaluation.summary()
    return {
        "successes": [bool(s) for s in evaluation.successes],
        "returns": [float(r) for r in evaluation.returns],
        "summary": {k: float(v) for k, v in summary.items()},
        "curve": _curve(trained["history"]),
        "seconds": trained["seconds"],
        "steps": len(trained["history"]),
        "corrector": corrector.metrics() if corrector is not None else {},
    }


def first_and_last_fifth(curve: list[float]) -> tuple[float, float]:
    """The mean of the finite values over the first and over the last fifth of a curve."""
    k = max(1, len(curve) // 5)
    return mean_se(curve[:k])[0], mean_se(curve[-k:])[0]


def fifths(
    by_method: Mapping[str, Mapping[int, Mapping[str, Any]]], metric: str
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per method, the per-seed means of a training curve over its first and its last fifth."""
    pairs = {
        m: [first_and_last_fifth(r["curve"][metric]) for r in per.values()]
        for m, per in by_method.items()
    }
    first = {m: [f for f, _ in p] for m, p in pairs.items()}
    last = {m: [end for _, end in p] for m, p in pairs.items()}
    return first, last


def random_play_success(
    env: str, env_kwargs: Mapping[str, Any], episodes: int, repeats: int = 20
) -> float:
    """The expected success of uniformly random legal actions on the evaluation deals (env
    seeds EVAL_SEED + k): what a model whose every answer is unusable gets, since the env then
    plays a random legal action."""
    from odyssey_core.envs import make_env

    rng = np.random.default_rng(EVAL_SEED)
    game = make_env(env, **env_kwargs)
    wins = 0
    try:
        for k in range(episodes):
            for _ in range(repeats):
                _, info = game.reset(seed=EVAL_SEED + k)
                done = False
                while not done:
                    legal = info["legal_actions"]
                    _, _, terminated, truncated, info = game.step(legal[rng.integers(len(legal))])
                    done = terminated or truncated
                wins += bool(terminated and info.get("success"))
    finally:
        game.close()
    return wins / (episodes * repeats)


def warm_headroom(
    env: str, per_seed: Mapping[int, WarmStart], sizes: GTRSizes, floor: float
) -> Headroom:
    """The warm start's success rate on the evaluation deals, between random legal play (or
    0) and 1 (every deal solved: the exact corrector's answers do)."""
    rates = [w.success_rate for w in per_seed.values()]
    solved = sum(sum(w.successes) for w in per_seed.values())
    return Headroom(
        metric="success rate",
        warm_start=mean_se(rates)[0],
        floor=floor,
        ceiling=1.0,
        label=env,
        note=f"{solved} of {sizes.episodes * len(per_seed)} deals solved by the warm-up's "
        f"models before RL; floor: random legal actions on the same deals "
        f"(max {sizes.max_steps} turns); ceiling: the exact corrector solves every one",
    )


#: where the real-checkpoint runs expect a pretrained VLM (the paper's is LLaVA-1.6-7B; the
#: policy loads the Qwen-VL family)
GTR_CHECKPOINT = "/models/Qwen2.5-VL-7B-Instruct"
#: the training presets (under configs/gtr/) of the real-checkpoint runs' arms
GTR_CHECKPOINT_ARMS = {"gtr": "points24", "rl4vlm": "ablations/rl_only"}


def gtr_checkpoint_run(seeds: int = 3) -> CheckpointRun:
    """The as-published Points24 pipeline (``train-gtr/points24``: one SFT epoch on
    solver-annotated deals, then Table 2's preset) with a pretrained VLM, GTR against RL4VLM
    per training seed: what would decide the claims this comparison cannot."""
    return CheckpointRun.per_arm_and_seed(
        "train-gtr/points24",
        decides=(
            "cards-points24: GTR > RL4VLM (success rate)",
            "cards-points24: RL4VLM's thoughts collapse (distinct-2 falls), GTR's do not",
        ),
        needs=(
            "a model that reads card ranks from pixels and writes coherent thoughts before RL "
            "(the paper's LLaVA after SFT). The tiny random vision tower reads neither: success "
            "sits at random play's floor, and there are no coherent thoughts to collapse. GTR's "
            "arm asks GPT-4o for corrections (OPENAI_API_KEY; GTR_CORRECTOR_BASE_URL / _MODEL "
            f"for another server). Set the checkpoint folder in place of {GTR_CHECKPOINT}."
        ),
        reads=(
            "the success rate over the evaluation deals and the thought-collapse metrics of "
            "each run's candidate (<run_dir>/evaluate/candidate/report/report.md, scores.json "
            "beside it); per arm the mean over the seeds, ordered with the one-sided Welch test "
            "used here."
        ),
        arms={
            arm: {"overrides": {"train": {"preset": preset}}}
            for arm, preset in GTR_CHECKPOINT_ARMS.items()
        },
        seeds=seeds,
        checkpoint=GTR_CHECKPOINT,
        run_dir="out/gtr/checkpoint",
        game="gtr-points24",
    )


def run_gtr(run: FidelityRun) -> FidelityReport:
    """The comparison end to end; see the module docstring."""
    started = time.perf_counter()
    logging.getLogger("odyssey_core.recipes.gtr.train").setLevel(logging.ERROR)
    sizes = QUICK_SIZES if run.quick else DEFAULT_SIZES
    steps = int(run.budget_or(sizes.steps, sizes.steps))
    seeds = run.seed_list()
    results: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    warm: dict[str, dict[int, WarmStart]] = {}
    openai_line = ""
    for env in sizes.envs:
        results[env] = {}
        warm[env] = {}
        for seed in seeds:
            warm[env][seed] = _warm_start(run, env, seed, sizes, run.quick)
            start = warm[env][seed].policy_dir
            listed, openai_line = methods(sizes, seed, os.environ)
            for method in listed:
                key = (
                    f"gtr-{env}-{method.name}-seed{seed}-steps{steps}-err{sizes.error_rate}"
                    f"{sizes.tag(env)}-quick{int(run.quick)}"
                )
                run.log(f"[fidelity] gtr: {env} {method.name} seed {seed}")
                results[env].setdefault(method.name, {})[seed] = run.cached(
                    key,
                    lambda m=method, s=seed, w=start, e=env: train_and_evaluate(
                        run, e, m, s, w, sizes, steps
                    ),
                )

    findings: list[Finding] = []
    tables: list[Table] = []
    figures: list[Figure] = []
    floors = {
        env: random_play_success(env, sizes.env_kwargs(env), sizes.episodes) for env in sizes.envs
    }
    headroom = {env: warm_headroom(env, warm[env], sizes, floors[env]) for env in sizes.envs}
    for env, by_method in results.items():
        at_end = (
            f"the warm start is {headroom[env].status} on this game "
            f"({headroom[env].warm_start:.2f} against a floor of {headroom[env].floor:.2f}): "
            "this finding decides nothing about the methods"
            if headroom[env].status.startswith("at ")
            else ""
        )
        rate = {
            m: [mean_se([float(x) for x in r["successes"]])[0] for r in per.values()]
            for m, per in by_method.items()
        }
        for a, b, source in (("GTR", "RL4VLM", "GTR Table 1"), ("GTR", "SFT-only", "GTR Fig. 6")):
            test = ordering(a, rate[a], b, rate[b], ">")
            findings.append(
                Finding(
                    claim=f"{env}: {a} > {b} (success rate)",
                    source=source,
                    measurement=test.measurement(),
                    verdict=test.verdict,
                    note="; ".join(
                        n
                        for n in (
                            "Points24 is in the paper's Fig. 6 (RL4VLM 2.5%, SFT-only 11%, GTR "
                            "17.5%)"
                            if env == "cards-points24"
                            else "",
                            at_end,
                        )
                        if n
                    ),
                )
            )
        first, last = fifths(by_method, "distinct_2")
        rl_falls = ordering(
            "RL4VLM first fifth", first["RL4VLM"], "RL4VLM last fifth", last["RL4VLM"], ">"
        )
        gtr_holds = ordering("GTR last fifth", last["GTR"], "GTR first fifth", first["GTR"], ">=")
        findings.append(
            Finding(
                claim=f"{env}: RL4VLM's thoughts collapse (distinct-2 falls), GTR's do not",
                source="GTR Fig. 1, Fig. 5, Sec. 3",
                measurement=f"RL4VLM {rl_falls.measurement()}; GTR {gtr_holds.measurement()}",
                verdict=combine([rl_falls.verdict, gtr_holds.verdict]),
                note="distinct-2 of the training rollouts' thoughts, mean over the first and the "
                "last fifth of the steps of each seed; the paper saw collapse mainly on Points24",
            )
        )
        rows = []
        for m, per in by_method.items():
            runs = list(per.values())
            pooled = [bool(x) for r in runs for x in r["successes"]]
            low, high = wilson_interval(sum(pooled), len(pooled))
            rows.append(
                [
                    m,
                    len(per),
                    format_mean_se(rate[m]),
                    f"[{low:.2f}, {high:.2f}] of {len(pooled)}",
                    format_mean_se([r["summary"]["mean_return"] for r in per.values()], 2),
                    format_mean_se(
                        [r["summary"].get("collapse/valid_rate", math.nan) for r in per.values()]
                    ),
                    format_mean_se(
                        [r["summary"].get("collapse/distinct_2", math.nan) for r in per.values()]
                    ),
                    f"{np.mean([r['steps'] for r in per.values()]):.0f}",
                    f"{np.mean([r['seconds'] for r in per.values()]):.0f}",
                    f"{np.mean([r['corrector'].get('injected_errors', 0) for r in runs]):.0f}",
                ]
            )
        warm_rates = [w.success_rate for w in warm[env].values()]
        pooled = [bool(x) for w in warm[env].values() for x in w.successes]
        low, high = wilson_interval(sum(pooled), len(pooled))
        rows.insert(
            0,
            [
                "warm start (before RL)",
                len(warm_rates),
                format_mean_se(warm_rates),
                f"[{low:.2f}, {high:.2f}] of {len(pooled)}",
                format_mean_se([w.summary["mean_return"] for w in warm[env].values()], 2),
                format_mean_se(
                    [w.summary.get("collapse/valid_rate", math.nan) for w in warm[env].values()]
                ),
                format_mean_se(
                    [w.summary.get("collapse/distinct_2", math.nan) for w in warm[env].values()]
                ),
                "0",
                "",
                "",
            ],
        )
        tables.append(
            Table(
                f"{env}: final models on {sizes.episodes} fixed deals",
                [
                    "method",
                    "seeds",
                    "success (mean ± s.e.)",
                    "pooled Wilson 95%",
                    "return",
                    "valid rate",
                    "distinct-2",
                    "RL steps",
                    "train s",
                    "injected errors",
                ],
                rows,
            )
        )

        def band(metric: str, per: dict[int, dict[str, Any]]) -> Any:
            runs = []
            for r in per.values():
                xs, ys = r["curve"]["step"], r["curve"][metric]
                keep = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
                if keep:
                    runs.append(([x for x, _ in keep], [y for _, y in keep]))
            return seed_band(runs)

        short = env.removeprefix("cards-")
        figures.append(
            Figure(
                f"gtr_success_{short}",
                f"{env}: training rollouts' success (EMA 0.85, ± s.e.)",
                "RL step",
                "success rate",
                [Series.of(m, band("success", per)) for m, per in by_method.items()],
            )
        )
        figures.append(
            Figure(
                f"gtr_collapse_{short}",
                f"{env}: thought collapse over training (EMA 0.85, ± s.e.)",
                "RL step",
                "distinct-2 / valid rate",
                [
                    Series.of(f"{m} {label}", band(metric, per))
                    for m, per in by_method.items()
                    for metric, label in (("distinct_2", "distinct-2"), ("valid_rate", "valid"))
                ],
            )
        )

    warm_data = {
        env: {seed: {"successes": w.successes, "summary": w.summary} for seed, w in per.items()}
        for env, per in warm.items()
    }
    noisy = describe_corrector("noisy_programmatic", {"error_rate": sizes.error_rate})
    setup = [
        f"Sizes ({'quick' if run.quick else 'default'}): {asdict(sizes)}; RL steps per run "
        f"{steps} (the --budget unit: RL steps per run, the same for every method).",
        f"Envs: {', '.join(sizes.envs)}"
        + (" (quick: one env and one step: a smoke size)" if run.quick else "")
        + f"; seeds {seeds}.",
        "Methods: RL4VLM = configs/gtr/ablations/rl_only.yaml (env rewards only, no corrector); "
        "GTR = gtr.yaml; SFT-only = sft_only.yaml (corrector-guided cloning, PPO off); all "
        "under configs/gtr/tiny.yaml's sizes with a constant learning rate "
        f"{sizes.lr}.",
        f"Corrector of GTR and SFT-only: {noisy['label']}. The error draws are seeded by the "
        "training seed.",
        openai_line,
        f"Start: per (env, seed), a format warm-up of {sizes.warmup_steps} steps cloning the "
        "exact programmatic corrector's whole answers (GTR with PPO off), lr "
        f"{sizes.warmup_lr}, cached in the work folder; it is evaluated on the same deals as "
        "the final models (the headroom section).",
        "Variants (env kwargs besides max_steps): "
        + ("; ".join(f"{env}: {kw}" for env, kw in sizes.variants.items()) or "none")
        + (f". {VARIANTS_WHY}" if sizes.variants else ".")
        + " Rules, actions and rewards are the registered games'.",
        "Training curves: the training rollouts' task success and env return (GTR's format "
        "bonus excluded) and the thought-collapse metrics, per RL step.",
        f"Evaluation: {sizes.episodes} fixed deals per final model (seeds from {EVAL_SEED}), "
        "sampling as in training.",
    ]
    caveats = [
        "The corrector is the programmatic oracle with injected errors, not a VLM: its mistakes "
        "are uniform and independent, unlike GPT-4o's.",
        "The policy is a tiny random Qwen3-VL, not LLaVA-7b; a few CPU RL steps are far from "
        "the paper's 15k, so thought collapse has little time to show.",
        "Verdicts are one-sided Welch tests over the training seeds' numbers: a gap smaller "
        "than the seeds' spread reads 'cannot tell', whatever its sign.",
    ]
    return report_for(
        run,
        "gtr",
        title="GTR on the gym_cards games: RL4VLM vs GTR vs SFT-only",
        paper="GTR: Guided Thought Reinforcement (Table 1, Fig. 5, Fig. 6)",
        setup=setup,
        findings=findings,
        tables=tables,
        figures=figures,
        caveats=caveats,
        headroom=list(headroom.values()),
        checkpoint_runs=[gtr_checkpoint_run()],
        elapsed_s=time.perf_counter() - started,
        data={"sizes": asdict(sizes), "steps": steps, "results": results, "warm": warm_data},
    )

"""The ESPO recipe on the one trainer (ESPO paper, Algorithm 1): episode-wise GRPO over
teacher-forced demonstrations.

It configures the engine and plugs one hook into it; the loop is
:class:`odyssey_core.rl.trainer.Trainer`:

- envs: :class:`~odyssey_core.envs.persona.env.PersonaEnv` in replay mode (every step shows
  the demonstration's screen and its history, whatever the agent answered: the paper trains
  and scores teacher-forced), wrapped in
  :class:`~odyssey_core.recipes.espo.wrapper.StageRewardWrapper`, which scores each answer
  with its stage's verifiable reward;
- budget: :class:`EpisodeSchedule` picks ``episodes_per_step`` demonstrated episodes per step
  (an epoch is one pass over the training split in a seeded order) and starts each of them
  G = ``samples_per_step`` times: the G episodes of one demonstration form a group, and
  episode g of the group is pseudo-episode g (sample g of every step);
- estimator: ``espo`` (A_step + w * A_COUT) or ``grpo_step`` (vanilla step GRPO), from
  :mod:`~odyssey_core.recipes.espo.advantages`; no value function;
- objective: ``token_ppo``, GRPO's clipped surrogate (clip 0.2 / 0.3) with a k3 KL to the
  model the run started from (the SFT model);
- sampler: ``episodes`` (the episodic batch sampler: one demonstration and all its samples per
  minibatch, in time order) or ``shuffled_turns_equal_steps`` (vanilla GRPO: the batch's turns
  shuffled across its demonstrations, as many minibatches as ``episodes`` makes);
- updater: AdamW, lr 1e-6, weight decay 1e-2, constant;
- rollout engine: the trainer's model, or vLLM / an OpenAI-compatible server that the
  trainer's weights are pushed to after every update (``rollout.backend``);
- collapse monitoring of the thoughts (``collapse/*`` metrics, :func:`espo_collapse_metrics`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from odyssey_core.envs.persona.dataset import read_dataset
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.envs.persona.episode import EpisodeRecord
from odyssey_core.envs.vector import SyncVectorEnv
from odyssey_core.eval.collapse import CollapseReport, CollapseSettings, collapse_metrics
from odyssey_core.protocol.gui import parse_gui_answer
from odyssey_core.protocol.parsing import ParsedResponse
from odyssey_core.recipes.espo.data import resolve_dataset
from odyssey_core.recipes.espo.prompts import ESPO_SYSTEM_PROMPT
from odyssey_core.recipes.espo.rewards import StageRewardSettings
from odyssey_core.recipes.espo.settings import EspoSettings
from odyssey_core.recipes.espo.wrapper import StageRewardWrapper
from odyssey_core.rl.build import ppo_objective, ppo_trainer_config, ppo_updater, rollout_collector
from odyssey_core.rl.checkpoint import latest_checkpoint
from odyssey_core.rl.hooks import CollapseMonitor
from odyssey_core.rl.policy import build_policy, build_reference, resolve_base_model
from odyssey_core.rl.trainer import MetricsCallback, Trainer, TrainerConfig, TrainerHook
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import (
    EpisodeBudget,
    EpisodeStart,
    default_info_extras,
    stream_seed,
)

__all__ = [
    "GUI_ACTION_WORDS",
    "EpisodeSchedule",
    "build_trainer",
    "espo_collapse_metrics",
    "espo_info_extras",
    "make_espo_env",
    "steps_per_epoch",
    "trainer_config",
]


def espo_info_extras(before: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The facts of a turn the estimators and metrics read: the stage it answered, its
    accuracy and format scores, the pool step's Intent_acc, the demonstration it belongs to."""
    return {
        **default_info_extras(before, info),
        "episode": info.get("episode_id"),
        "stage": info.get("answered_stage"),
        "accuracy": float(info.get("accuracy", 0.0)),
        "format": float(info.get("format", 0.0)),
        "intent_acc": info.get("intent_acc"),
        "gold": info.get("gold"),
        "parsed": info.get("parsed"),
    }


#: the words by which a thought names each GUI action (the collapse monitor's agreement)
GUI_ACTION_WORDS: dict[str, tuple[str, ...]] = {
    "click": ("click", "tap", "press", "select", "open", "choose", "pick"),
    "type": ("type", "enter", "input", "write", "search", "fill"),
    "scroll up": ("scroll", "up", "swipe"),
    "scroll down": ("scroll", "down", "swipe", "more"),
    "scroll left": ("scroll", "left", "swipe"),
    "scroll right": ("scroll", "right", "swipe"),
    "exit": ("exit", "close", "back", "dismiss", "leave"),
    "pool_found": ("found", "match", "matches", "fit", "fits", "pool", "list", "results"),
    "recommendation": ("recommend", "recommendation", "yes", "no", "suggest", "candidate"),
}


def espo_collapse_metrics(
    texts: Sequence[str], frames: Sequence[Any], settings: CollapseSettings | None = None
) -> CollapseReport:
    """Thought-collapse metrics of GUI answers: the think block is the reasoning, the action
    type the answered "button" (named by :data:`GUI_ACTION_WORDS`)."""
    parsed = []
    for text in texts:
        answer = parse_gui_answer(text)
        action = answer.action.action if answer.valid and answer.action is not None else None
        parsed.append(
            ParsedResponse(
                buttons=(action,) if action is not None else (),
                valid=action is not None,
                reasoning=answer.thought,
                error=answer.error,
            )
        )
    base = settings or CollapseSettings()
    return collapse_metrics(
        parsed, list(frames), base.model_copy(update={"button_words": GUI_ACTION_WORDS})
    )


def _espo_collapse(batch: TurnBatch) -> CollapseReport:
    return espo_collapse_metrics([e.get("response", "") for e in batch.extras], batch.frames)


def make_espo_env(
    dataset: Path,
    split: str,
    channel: str | None,
    rewards: StageRewardSettings,
    history_window: int | None = None,
) -> StageRewardWrapper:
    env = PersonaEnv(
        dataset=dataset,
        split=split,
        channel=channel,
        mode="replay",
        history_window=history_window,
    )
    return StageRewardWrapper(env, rewards)


def steps_per_epoch(episodes: int, episodes_per_step: int) -> int:
    return max(1, math.ceil(episodes / episodes_per_step))


class EpisodeSchedule(TrainerHook):
    """Which demonstrations a step trains on: epoch e visits the training episodes in a seeded
    order, ``episodes_per_step`` at a time; each is started G times (a group of G samples).
    The order is a pure function of (seed, epoch), so a resumed run replays it exactly."""

    name = "episode_schedule"

    def __init__(self, episode_ids: Sequence[str], episodes_per_step: int, samples: int, seed: int):
        if not episode_ids:
            raise ValueError("the training split has no episodes")
        self.episode_ids = list(episode_ids)
        self.episodes_per_step = int(episodes_per_step)
        self.samples = int(samples)
        self.seed = int(seed)
        self.per_epoch = steps_per_epoch(len(self.episode_ids), self.episodes_per_step)

    def step_episodes(self, step: int) -> list[int]:
        """Indices (into ``episode_ids``) of the demonstrations training step ``step`` uses."""
        epoch, within = divmod(step, self.per_epoch)
        order = np.random.default_rng(stream_seed(self.seed, epoch, 0xE5)).permutation(
            len(self.episode_ids)
        )
        start = within * self.episodes_per_step
        return [int(i) for i in order[start : start + self.episodes_per_step]]

    def episode_starts(self, trainer: Trainer) -> list[EpisodeStart]:
        return [
            EpisodeStart(options={"episode": self.episode_ids[i]}, group=i, sample=g)
            for i in self.step_episodes(trainer.step)
            for g in range(self.samples)
        ]

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        """Mean accuracy and reward per stage, the pool step's Intent_acc, the format rate."""
        metrics: dict[str, float] = {}
        stages = batch.stage or [e.get("stage") for e in batch.extras]
        for stage in ("search", "pool", "recommend"):
            rows = [i for i, s in enumerate(stages) if s == stage]
            if rows:
                metrics[f"espo/{stage}_accuracy"] = float(
                    np.mean([batch.extras[i]["accuracy"] for i in rows])
                )
                metrics[f"espo/{stage}_reward"] = float(batch.rewards[rows].mean())
        intents = [e["intent_acc"] for e in batch.extras if e.get("intent_acc") is not None]
        if intents:
            metrics["espo/intent_acc"] = float(np.mean(intents))
        metrics["espo/format_valid"] = float(np.mean([e["format"] for e in batch.extras]))
        return metrics


def trainer_config(s: EspoSettings, steps: int) -> TrainerConfig:
    g, r = s.ppo, s.rollout
    return ppo_trainer_config(
        s,
        EpisodeBudget(r.episodes_per_step * r.samples_per_step),
        "token_ppo",
        ppo_objective(g, kl_coef=g.kl_coef, dual_clip=g.dual_clip),
        steps=steps,
        sampler=g.sampler,
    )


def training_episodes(dataset: Path, channel: str | None) -> list[EpisodeRecord]:
    episodes = read_dataset(dataset, split="train")
    if channel is not None:
        episodes = [e for e in episodes if e.channel == channel]
    if not episodes:
        where = f" of channel {channel!r}" if channel else ""
        raise ValueError(f"{dataset} has no training episodes{where}")
    return episodes


def build_trainer(
    settings: EspoSettings,
    out_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[MetricsCallback] = (),
) -> Trainer:
    """Everything of one ESPO run (``model.path: null`` builds the tiny model, ``data.dataset:
    null`` generates the preset's episodes into the run); with ``resume``, continue from the
    latest complete checkpoint under ``out_dir``."""
    s, r = settings, settings.rollout
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dataset = resolve_dataset(s.data, out)
    episodes = training_episodes(dataset, s.data.channel)
    checkpoint = latest_checkpoint(out) if resume else None
    policy = build_policy(s.model, s.lora, out, checkpoint, system_prompt=ESPO_SYSTEM_PROMPT)
    n_envs = r.episodes_per_step * r.samples_per_step  # one batched generate per turn
    factory = functools.partial(
        make_espo_env, dataset, "train", s.data.channel, r.rewards, r.history_window
    )
    collector, sync_hooks = rollout_collector(
        r.backend,
        policy,
        out,
        SyncVectorEnv([factory] * n_envs),
        r.generation,
        max_turns=max(len(e.steps) for e in episodes),
        response_format="espo",
        info_extras=espo_info_extras,
    )
    updater = ppo_updater(s, policy)
    schedule = EpisodeSchedule(
        [e.episode_id for e in episodes], r.episodes_per_step, r.samples_per_step, s.seed
    )
    reference = None
    if s.ppo.kl_coef > 0:  # the KL anchors the policy to the model the run started from
        start = resolve_base_model(s.model, out)
        reference = build_reference(
            policy, r.generation.temperature, r.score_micro_batch, frozen_model=start
        )
    trainer = Trainer(
        trainer_config(s, s.steps or s.epochs * schedule.per_epoch),
        policy,
        collector,
        None,
        updater,
        out,
        hooks=[schedule, CollapseMonitor(_espo_collapse), *sync_hooks],
        callbacks=callbacks,
        reference=reference,
    )
    if resume:
        trainer.resume()
    return trainer

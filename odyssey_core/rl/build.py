"""The trainer wiring every RL recipe shares: its collector on the rollout backend, its PPO
objective and its optimiser, each read from the run's settings the same way.

A recipe's settings have ``ppo`` (clip_low, clip_high, entropy_coef, epochs, minibatch_size, lr,
weight_decay, grad_clip), ``advantage``, ``rollout`` (score_micro_batch, generation), ``model``
(dtype, device) and ``deepspeed``; what differs per recipe (the env, the
budget, extra objective or schedule knobs) is passed in.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from odyssey_core.policy.base import GenerationParams
from odyssey_core.policy.weight_sync import RolloutBackendSettings
from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.rl.hooks import rollout_backend
from odyssey_core.rl.objectives import ObjectiveSettings
from odyssey_core.rl.trainer import TrainerConfig, TrainerHook
from odyssey_core.rl.updater import PlainUpdater, UpdaterSettings, build_updater
from odyssey_core.rollout.collector import Budget, Collector, InfoExtras, VectorEnvLike

__all__ = ["ppo_objective", "ppo_trainer_config", "ppo_updater", "rollout_collector"]


def rollout_collector(
    backend: RolloutBackendSettings,
    policy: Any,
    out_dir: str | Path,
    vector_env: VectorEnvLike,
    generation: GenerationParams,
    *,
    max_turns: int,
    response_format: str,
    info_extras: InfoExtras,
) -> tuple[Collector, list[TrainerHook]]:
    """A collector that generates with ``backend`` (the trainer's ``policy`` or an engine kept
    in sync with it) and parses answers with the named entry of ``RESPONSE_FORMATS``; the
    hooks that keep the engine's weights in sync go to the trainer."""
    rollout_policy, sync_hooks = rollout_backend(backend, policy, out_dir)
    collector = Collector(
        vector_env,
        rollout_policy,
        generation,
        max_turns=max_turns,
        response_format=RESPONSE_FORMATS.get(response_format),
        info_extras=info_extras,
        tokenizer=policy.tokenizer,
    )
    return collector, sync_hooks


def ppo_objective(ppo: Any, **extra: Any) -> ObjectiveSettings:
    """The clipped objective of the run's ``ppo`` section (its clips and entropy bonus) and
    the recipe's ``extra`` knobs (kl_coef, thought_weight, dual_clip)."""
    return ObjectiveSettings(
        eps_low=ppo.clip_low, eps_high=ppo.clip_high, entropy_coef=ppo.entropy_coef, **extra
    )


def ppo_trainer_config(
    settings: Any,
    budget: Budget,
    objective: str,
    objective_settings: ObjectiveSettings,
    *,
    steps: int | None = None,
    **fields: Any,
) -> TrainerConfig:
    """The loop's config of a PPO run: the run's seed, checkpointing and advantage section, its
    ``ppo`` epochs and minibatch size, its rollout's scoring micro-batch and sampling
    temperature, and the recipe's own ``fields``; ``steps`` replaces ``settings.steps``."""
    s = settings
    config = TrainerConfig.for_run(
        s,
        budget=budget,
        estimator=s.advantage.estimator,
        advantage=s.advantage,
        objective=objective,
        objective_settings=objective_settings,
        epochs=s.ppo.epochs,
        minibatch_size=s.ppo.minibatch_size,
        score_micro_batch=s.rollout.score_micro_batch,
        temperature=s.rollout.generation.temperature,
        **fields,
    )
    return config if steps is None else dataclasses.replace(config, steps=steps)


def ppo_updater(
    settings: Any,
    policy: Any,
    extra_groups: list[dict[str, Any]] | None = None,
    **schedule: Any,
) -> PlainUpdater:
    """The optimiser of ``policy.model`` with the run's ``ppo`` lr, weight decay and clip, its
    ``deepspeed`` config and its model's dtype and device; ``schedule`` sets the lr schedule
    (schedule, final_lr, lr_steps), ``extra_groups`` adds parameter groups (a value head)."""
    ppo, model = settings.ppo, settings.model
    updater_settings = UpdaterSettings(
        lr=ppo.lr,
        weight_decay=ppo.weight_decay,
        grad_clip=ppo.grad_clip,
        deepspeed=settings.deepspeed,
        dtype=model.dtype,
        device=model.device,
        **schedule,
    )
    return build_updater(policy.model, updater_settings, extra_groups)

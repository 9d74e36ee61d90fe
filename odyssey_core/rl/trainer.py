"""The one RL training loop. Recipes configure it (:class:`TrainerConfig`) and plug hooks into
it (:class:`TrainerHook`); none of them writes a loop of its own.

One training step:

    1. rollout      the collector spends the step's budget (whole episodes, or turns with
                    auto-reset); hooks may choose how the episodes start (the Odysseus
                    curriculum picks levels). The rollout is a pure function of
                    ``collection_seed(seed, step)``.
    2. on_batch     hooks read the batch (GTR's corrections join the DAgger buffer; collapse
                    monitoring) and add metrics.
    3. values       V(o_t) from the value function when the estimator reads values, and
                    V(o_{t+1}) on truncated rows when it bootstraps.
    4. advantages   ESTIMATORS[estimator](batch, settings) -> advantages, returns.
    5. value fit    a separate value network (the CNN critic) regresses on the returns.
    6. policy       unless in critic warm-up: drop turns with A_t == 0 exactly (optional),
                    recompute the old log-probs with the current weights, then ``epochs``
                    passes of minibatches drawn by ``SAMPLERS[sampler]`` (shuffled turns,
                    or whole episodes in time order: ESPO). A minibatch is scored
                    ``score_micro_batch`` turns at a time, each micro-batch's loss is
                    backpropagated at once (so at most one micro-batch of graphs is alive),
                    weighted by its share of the objective's units (tokens or turns), then
                    the hooks' extra losses (thought cloning) go the same way, then one
                    optimiser step.
    7. on_step_end  hooks update their state (curriculum weights); the lr schedule advances.
    8. metrics      one JSON line per step in ``<out>/metrics.jsonl`` and every callback;
                    checkpoints every ``checkpoint_every`` steps.

Everything random is seeded from ``seed`` and saved in checkpoints (hooks included), so a
resumed run continues bit-for-bit like an uninterrupted one (CPU, float32).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.rl.advantages import ESTIMATORS, AdvantageSettings
from odyssey_core.rl.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_trainer_state,
    restore_rng_state,
    save_checkpoint,
)
from odyssey_core.rl.critic import explained_variance
from odyssey_core.rl.losses import select_nonzero_advantage_turns
from odyssey_core.rl.objectives import OBJECTIVES, ObjectiveSettings, ScoredTurns
from odyssey_core.rl.samplers import SAMPLERS
from odyssey_core.rl.updater import PlainUpdater
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import Budget, Collector, Starts

__all__ = [
    "METRICS_FILE",
    "ExtraLoss",
    "MetricsCallback",
    "Trainer",
    "TrainerConfig",
    "TrainerHook",
    "collection_seed",
]

log = logging.getLogger(__name__)
MetricsCallback = Callable[[int, dict[str, float]], None]
METRICS_FILE = "metrics.jsonl"
#: a deferred piece of an extra loss: called when its turn comes, it returns (loss, metrics);
#: the loss is already scaled to its share of the minibatch's extra term
ExtraLoss = Callable[[], tuple[torch.Tensor, dict[str, float]]]


def collection_seed(run_seed: int, step: int) -> int:
    """The rollout seed of training step ``step``: a pure function, so a resume needs only
    the step counter to replay the same env seeds and sampling seeds."""
    return int(np.random.SeedSequence([run_seed % 2**32, step, 0x0D]).generate_state(1)[0])


def _chunks(index: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    for start in range(0, index.numel(), size):
        yield index[start : start + size]


@dataclass(frozen=True)
class TrainerConfig:
    """What the loop needs to know; each recipe builds one from its own settings."""

    budget: Budget
    estimator: str
    advantage: AdvantageSettings
    objective: str
    objective_settings: ObjectiveSettings
    seed: int = 0
    steps: int = 1
    checkpoint_every: int = 10
    epochs: int = 1
    minibatch_size: int = 4096  # per optimiser step, in the sampler's unit (turns / episodes)
    sampler: str = "shuffled_turns"  # a name in SAMPLERS: how minibatches are drawn
    score_micro_batch: int = 4  # turns per scoring forward (and backward)
    temperature: float = 1.0  # the sampling temperature the log-probs are taken at
    skip_zero_advantage: bool = False
    policy_loss: bool = True  # false: only the hooks' extra losses train the policy
    max_turn_samples: int | None = None  # stop once this many turns were collected in all
    config_dump: dict[str, Any] = field(default_factory=dict)  # saved beside checkpoints

    @classmethod
    def for_run(cls, settings: Any, **fields: Any) -> TrainerConfig:
        """A config for a recipe's run settings: their ``seed``, ``steps`` and
        ``checkpoint_every``, the settings saved beside each checkpoint, and ``fields``."""
        return cls(
            seed=settings.seed,
            steps=settings.steps,
            checkpoint_every=settings.checkpoint_every,
            config_dump=settings.model_dump(mode="json"),
            **fields,
        )


class TrainerHook:
    """A recipe's plug-in points; every method is optional. ``name`` keys its checkpoint state."""

    name = "hook"

    def episode_starts(self, trainer: Trainer) -> Starts:
        """How this step's episodes start (None: as the envs are)."""
        return None

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        """Read the rollout before values and advantages; return metrics."""
        return {}

    def extra_losses(self, trainer: Trainer) -> list[ExtraLoss]:
        """Deferred loss pieces added to one minibatch (called once per minibatch)."""
        return []

    def on_step_end(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


class Trainer:
    """Owns one run's policy, collector, value function, updater and hooks; ``train()`` runs it."""

    def __init__(
        self,
        config: TrainerConfig,
        policy: Any,
        collector: Collector,
        value_function: Any,
        updater: PlainUpdater,
        out_dir: str | Path,
        *,
        hooks: Sequence[TrainerHook] = (),
        callbacks: Sequence[MetricsCallback] = (),
        reference: Callable[[TurnBatch], list[torch.Tensor]] | None = None,
    ) -> None:
        self.config = config
        self.policy, self.collector = policy, collector
        self.value_function, self.updater = value_function, updater
        self.estimator = ESTIMATORS.get(config.estimator)
        self.objective = OBJECTIVES.get(config.objective)
        self.sampler = SAMPLERS.get(config.sampler)
        if self.estimator.needs_values and value_function is None:
            raise ValueError(f"estimator {config.estimator!r} needs a value function")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.hooks = list(hooks)
        names = [h.name for h in self.hooks]
        if len(set(names)) != len(names):
            raise ValueError(f"hook names must be distinct, got {names}")
        self.callbacks = list(callbacks)
        self.reference = reference  # log pi_ref for a KL penalty
        self.generator = torch.Generator().manual_seed(config.seed)  # minibatch shuffling
        self.step = 0  # training steps completed
        self.turn_samples = 0  # turns collected by the completed steps

    def hook(self, name: str) -> TrainerHook:
        for hook in self.hooks:
            if hook.name == name:
                return hook
        raise KeyError(f"no hook named {name!r}; hooks: {[h.name for h in self.hooks]}")

    # -- one training step ----------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        c, step = self.config, self.step
        timing: dict[str, float] = {}
        started = time.perf_counter()

        starts = None
        for hook in self.hooks:
            starts = hook.episode_starts(self) or starts
        batch, rollout = self.collector.collect(
            c.budget, seed=collection_seed(c.seed, step), starts=starts
        )
        timing["rollout_s"] = time.perf_counter() - started
        self.turn_samples += len(batch)
        metrics: dict[str, float] = {"step": float(step + 1)}
        metrics["rollout/turn_samples_total"] = float(self.turn_samples)
        metrics.update(rollout.as_dict())
        for hook in self.hooks:
            metrics.update(hook.on_batch(self, batch))

        t0 = time.perf_counter()
        values = bootstrap = None
        if self.estimator.needs_values:
            values, bootstrap = self.value_function.predict(
                self.policy, batch, bootstrap=self.estimator.bootstraps
            )
        timing["critic_predict_s"] = time.perf_counter() - t0
        batch = batch.with_fields(values=values, bootstrap_values=bootstrap)
        advantages, returns = self.estimator(batch, c.advantage)
        batch = batch.with_fields(advantages=advantages, returns=returns)
        if values is not None:  # how well the value function knew this batch before fitting
            metrics["critic/explained_variance_pre"] = explained_variance(values, returns)
        metrics["adv/mean"] = float(advantages.mean())
        metrics["adv/std"] = float(advantages.std(correction=0))
        metrics["adv/nonzero_frac"] = float((advantages != 0).float().mean())

        t0 = time.perf_counter()
        if self.value_function is not None:
            metrics.update(self.value_function.fit(batch, returns))
        timing["critic_train_s"] = time.perf_counter() - t0

        may_update = self.value_function is None or self.value_function.actor_may_update(step)
        metrics["actor/updated"] = float(may_update)
        if may_update:
            metrics.update(self._policy_update(batch, timing))

        for hook in self.hooks:
            metrics.update(hook.on_step_end(self, batch))
        metrics["actor/lr"] = self.updater.lr
        self.updater.end_of_step()

        critic_s = timing["critic_predict_s"] + timing["critic_train_s"]
        update_s = critic_s + timing.get("old_logprob_s", 0.0) + timing.get("actor_update_s", 0.0)
        timing["critic_share_of_update"] = critic_s / update_s if update_s > 0 else float("nan")
        timing["step_s"] = time.perf_counter() - started
        metrics.update({f"time/{k}": v for k, v in timing.items()})
        self.step += 1
        return metrics

    # -- the policy update ----------------------------------------------------------------------

    def _score(
        self, turns: TurnBatch, rows: list[int], entropies: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        return self.policy.score(
            [turns.prompt_ids[i] for i in rows],
            [turns.response_ids[i] for i in rows],
            [turns.frames[i] for i in rows],
            self.config.temperature,
            self.config.score_micro_batch,
            **({} if entropies is None else {"entropies": entropies}),
        )

    def _policy_update(self, batch: TurnBatch, timing: dict[str, float]) -> dict[str, float]:
        c = self.config
        assert batch.advantages is not None and batch.returns is not None
        has_tokens = torch.tensor([r.numel() > 0 for r in batch.response_ids], dtype=torch.bool)
        if c.skip_zero_advantage:
            kept = select_nonzero_advantage_turns(batch.advantages)
            kept = kept[has_tokens[kept]]
        else:
            kept = torch.nonzero(has_tokens, as_tuple=False).flatten()
        metrics = {"actor/skipped_turn_frac": 1.0 - kept.numel() / max(1, len(batch))}
        if kept.numel() == 0:
            return metrics
        turns = batch.select(kept)
        everything = list(range(len(turns)))

        # Old log-probs: the current weights, before any update of this step (recomputed
        # rather than trusting the sampler's numbers; the gap is a metric).
        t0 = time.perf_counter()
        old: list[torch.Tensor] = []
        ref = None
        if c.policy_loss:
            with torch.no_grad():
                old = [o.detach().float().cpu() for o in self._score(turns, everything)]
                ref = self.reference(turns) if self.reference is not None else None
            gaps = torch.cat(
                [(o - b).abs() for o, b in zip(old, turns.behaviour_logprobs, strict=True)]
            )
            metrics["actor/old_vs_behaviour_logprob_abs"] = float(gaps.mean())
        timing["old_logprob_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        grad_norms: list[float] = []
        units_seen = 0
        # a sampler's unit: the group (ESPO: one demonstrated episode and all its samples)
        # where the batch has groups, else the episode
        units = turns.group_id if turns.group_id is not None else turns.episode_ids
        for _ in range(c.epochs):
            for minibatch in self.sampler(units, c.minibatch_size, self.generator):
                pieces = list(_chunks(minibatch, c.score_micro_batch)) if c.policy_loss else []
                extras = [piece for hook in self.hooks for piece in hook.extra_losses(self)]
                if not pieces and not extras:
                    continue
                lengths = [turns.response_ids[i].numel() for i in minibatch.tolist()]
                total = self.objective.units(lengths)
                backwards = len(pieces) + len(extras)
                done = 0
                for piece in pieces:
                    rows = piece.tolist()
                    loss, piece_metrics, units = self._piece_loss(turns, rows, old, ref)
                    done += 1
                    self.updater.backward(loss * (units / total), done == backwards)
                    for key, value in piece_metrics.items():
                        sums[key] = sums.get(key, 0.0) + value * units
                        weights[key] = weights.get(key, 0.0) + units
                    units_seen += units
                for extra in extras:
                    loss, extra_metrics = extra()
                    done += 1
                    self.updater.backward(loss, done == backwards)
                    for key, value in extra_metrics.items():
                        sums[key] = sums.get(key, 0.0) + value
                        weights[key] = weights.get(key, 0.0) + 1.0
                grad_norms.append(self.updater.step())
        timing["actor_update_s"] = time.perf_counter() - t0
        metrics.update({k: v / weights[k] for k, v in sums.items()})
        if grad_norms:
            metrics["actor/grad_norm"] = float(np.mean(grad_norms))
        metrics["actor/updates"] = float(len(grad_norms))
        metrics["actor/turns"] = float(kept.numel())
        metrics["actor/tokens"] = float(sum(r.numel() for r in turns.response_ids))
        if c.policy_loss:
            metrics[f"actor/{self.objective.unit}s_per_epoch"] = float(units_seen / c.epochs)
        return metrics

    def _piece_loss(
        self,
        turns: TurnBatch,
        rows: list[int],
        old: list[torch.Tensor],
        ref: list[torch.Tensor] | None,
    ) -> tuple[torch.Tensor, dict[str, float], int]:
        """The objective (+ an in-graph value loss) of a few turns, scored with gradients."""
        c = self.config
        wants_entropy = c.objective_settings.entropy_coef > 0
        entropies: list[torch.Tensor] | None = [] if wants_entropy else None
        value_fn = self.value_function
        scoring = (
            value_fn.scoring(self.policy) if value_fn is not None else contextlib.nullcontext([])
        )
        assert turns.advantages is not None and turns.returns is not None
        with torch.enable_grad():
            with scoring as captured:  # the value head reads this forward's hidden states
                new = self._score(turns, rows, entropies)
            scored = ScoredTurns(
                new_logprobs=new,
                old_logprobs=[old[i] for i in rows],
                advantages=turns.advantages[rows],
                thought_mask=[turns.thought_mask[i] for i in rows],
                action_mask=[turns.action_mask[i] for i in rows],
                entropies=entropies,
                ref_logprobs=None if ref is None else [ref[i] for i in rows],
            )
            loss, metrics = self.objective.fn(scored, c.objective_settings)
            if value_fn is not None and value_fn.in_graph:
                lengths = [turns.response_ids[i].numel() for i in rows]
                value_loss, value_metrics = value_fn.piece_loss(
                    captured, lengths, turns.returns[rows]
                )
                if value_loss is not None:
                    loss = loss + value_loss.to(loss.device)
                    metrics.update(value_metrics)
        units = self.objective.units([turns.response_ids[i].numel() for i in rows])
        return loss, metrics, units

    # -- the loop -------------------------------------------------------------------------------

    def budget_spent(self, steps: int) -> bool:
        """Whether ``steps`` steps are done or the turn-sample budget is used up."""
        samples = self.config.max_turn_samples
        return self.step >= steps or (samples is not None and self.turn_samples >= samples)

    def train(self, steps: int | None = None) -> list[dict[str, float]]:
        """Run until ``steps`` (default: the config's) steps are done or ``max_turn_samples``
        turns were collected (Section 4.2 compares estimators at 0.38M turn samples),
        checkpointing on the way and at the end."""
        total = self.config.steps if steps is None else steps
        history = []
        while not self.budget_spent(total):
            metrics = self.train_step()
            self._log(metrics)
            history.append(metrics)
            if self.step % self.config.checkpoint_every == 0 or self.budget_spent(total):
                self.save()
        return history

    def _log(self, metrics: dict[str, float]) -> None:
        with open(self.out_dir / METRICS_FILE, "a") as f:
            f.write(json.dumps(metrics, sort_keys=True) + "\n")
        for callback in self.callbacks:
            callback(self.step, metrics)

    def truncate_metrics(self) -> None:
        """Forget metric lines of steps after the checkpoint we resumed from (a killed run may
        have logged a step it never checkpointed; it will be logged again)."""
        path = self.out_dir / METRICS_FILE
        if not path.is_file():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= self.step]
        path.write_text("".join(ln + "\n" for ln in kept))

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "turn_samples": self.turn_samples,
            "seed": self.config.seed,
            "next_collection_seed": collection_seed(self.config.seed, self.step),
            "value_function": None
            if self.value_function is None
            else self.value_function.state_dict(),
            "policy_optimizer": self.updater.state_dict(),
            "generator": self.generator.get_state(),
            "rng": capture_rng_state(),
            "hooks": {hook.name: hook.state_dict() for hook in self.hooks},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.turn_samples = int(state["turn_samples"])
        if self.value_function is not None:
            self.value_function.load_state_dict(state["value_function"])
        self.updater.load_state_dict(state["policy_optimizer"])
        self.generator.set_state(state["generator"])
        restore_rng_state(state["rng"])
        for hook in self.hooks:
            hook.load_state_dict(state["hooks"].get(hook.name, {}))

    def resume(self) -> Path | None:
        """Continue from the latest complete checkpoint under ``out_dir``, if there is one
        (the policy weights must already be loaded from it); truncates the metrics log."""
        checkpoint = latest_checkpoint(self.out_dir)
        if checkpoint is not None:
            self.load_state_dict(load_trainer_state(checkpoint))
            log.info("resumed from %s (step %d)", checkpoint, self.step)
        self.truncate_metrics()
        return checkpoint

    def save(self) -> Path:
        path = save_checkpoint(
            self.out_dir,
            self.step,
            model=self.policy.model,
            processor=self.policy.processor,
            trainer_state=self.state_dict(),
            config=self.config.config_dump,
        )
        log.info("checkpoint %s", path)
        return path

    def close(self) -> None:
        close = getattr(self.collector.vector_env, "close", None)
        if close is not None:
            close()

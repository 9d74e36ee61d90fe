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

Under a launcher (``torchrun``, ``deepspeed``) every rank runs this loop on its own envs, and
the step is one step of the whole world (:mod:`odyssey_core.rl.distributed`):

- rollout: the step's budget is split with :func:`rank_budget` (``n // ranks`` episodes or
  turns each, the first ``n % ranks`` ranks one more; rank r plays the starts
  ``[first_r, first_r + count_r)`` of the hooks' plan) and rank r collects with
  ``rank_seed(collection_seed(seed, step), r)``; rank 0 keeps the one-process seed;
- advantages: every rank's turn-level scalars are gathered and the estimator runs on their
  union, so its batch-wide statistics are those of the whole step; each rank keeps its slice;
- value fit: each rank fits its value network on its own turns, then the networks (and their
  optimiser states) are averaged over ranks, so every rank predicts with the same one;
- policy: minibatches are drawn over the union's turns (the same draw on every rank, one
  generator with one seed), each rank backpropagates its own turns of the minibatch, weighted
  by their share of the minibatch's units over all ranks, and the updater averages the
  gradients (times the number of ranks: the sum of every rank's share) before it clips;
- metrics are means over ranks; rank 0 alone writes them and calls callbacks;
- ``on_batch`` sees the rank's own batch, ``on_step_end`` the union (the curriculum updates
  from every rank's episodes, so its weights stay the same everywhere);
- checkpoints: rank 0 writes the consolidated policy, every rank its own trainer state.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.common.metrics_log import MetricsLog
from odyssey_core.models.lora import lora_dropout_active
from odyssey_core.rl.advantages import ESTIMATORS, AdvantageSettings
from odyssey_core.rl.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_trainer_state,
    restore_rng_state,
    save_checkpoint,
)
from odyssey_core.rl.critic import explained_variance
from odyssey_core.rl.distributed import (
    GatheredTurns,
    World,
    average_state,
    barrier,
    gather_turns,
    join_launched_world,
    max_over_ranks,
    mean_over_ranks,
    rank_seed,
    split_evenly,
    sum_over_ranks,
)
from odyssey_core.rl.losses import episode_tail_turns, select_nonzero_advantage_turns
from odyssey_core.rl.objectives import OBJECTIVES, ObjectiveSettings, ScoredTurns
from odyssey_core.rl.samplers import SAMPLERS
from odyssey_core.rl.updater import PlainUpdater
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import Budget, Collector, EpisodeBudget, Starts, TurnBudget
from odyssey_core.rollout.frames import take_frames

__all__ = [
    "ExtraLoss",
    "MetricsCallback",
    "Trainer",
    "TrainerConfig",
    "TrainerHook",
    "collection_seed",
    "rank_budget",
]

log = logging.getLogger(__name__)
MetricsCallback = Callable[[int, dict[str, float]], None]
#: a deferred piece of an extra loss: called when its turn comes, it returns (loss, metrics);
#: the loss is already scaled to its share of the minibatch's extra term
ExtraLoss = Callable[[], tuple[torch.Tensor, dict[str, float]]]


def collection_seed(run_seed: int, step: int) -> int:
    """The rollout seed of training step ``step``: a pure function, so a resume needs only
    the step counter to replay the same env seeds and sampling seeds."""
    return int(np.random.SeedSequence([run_seed % 2**32, step, 0x0D]).generate_state(1)[0])


def planned_budget(budget: Budget, starts: Starts) -> Budget:
    """The step's episode budget given the hook's plan: a listed plan may hold fewer episodes
    than the budget (an epoch's last, shorter slice) and the step then plays just those; a
    longer list is an error, as is an empty one."""
    if not isinstance(budget, EpisodeBudget) or starts is None or callable(starts):
        return budget
    listed = len(list(starts))
    if listed == 0:
        raise ValueError("the episode plan for this step is empty")
    if listed > budget.episodes:
        raise ValueError(
            f"got {listed} episode starts for a step budget of {budget.episodes} episodes"
        )
    return EpisodeBudget(listed) if listed < budget.episodes else budget


def rank_budget(budget: Budget, starts: Starts, world: World) -> tuple[Budget, Starts]:
    """This rank's share of a step's budget and the starts of its episodes.

    ``n`` episodes (or turns) over ``W`` ranks: ``n // W`` each, the first ``n % W`` ranks one
    more (a turn budget is then rounded up to whole rounds of the rank's envs). With an
    episode budget, rank r plays episodes ``[first_r, first_r + count_r)`` of the plan: that
    slice of a list of starts, or ``starts(first_r + k)`` for its k-th episode. A turn budget
    keeps the starts as they are (each rank cycles through them). A world of one gets the
    budget and starts back unchanged.
    """
    if world.size == 1:
        return budget, starts
    total = budget.episodes if isinstance(budget, EpisodeBudget) else budget.turns
    first, count = split_evenly(total, world)
    if count == 0:
        raise ValueError(
            f"a step budget of {total} cannot be split over {world.size} ranks: every rank "
            "needs at least one episode (or turn); raise the budget or use fewer processes"
        )
    if isinstance(budget, TurnBudget):
        return TurnBudget(count), starts
    if starts is None:
        return EpisodeBudget(count), None
    if callable(starts):
        plan = starts
        return EpisodeBudget(count), lambda k: plan(first + k)
    listed = list(starts)
    if len(listed) != total:
        raise ValueError(f"got {len(listed)} episode starts for {total} episodes")
    return EpisodeBudget(count), listed[first : first + count]


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
    drop_episode_tail: int = 0  # each episode's last n turns stay out of the policy update
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
        """How this step's episodes start (None: as the envs are, or as another hook says);
        at most one hook of a trainer answers."""
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
        self.metrics_log = MetricsLog(self.out_dir)
        self.hooks = list(hooks)
        names = [h.name for h in self.hooks]
        if len(set(names)) != len(names):
            raise ValueError(f"hook names must be distinct, got {names}")
        device = torch.device(getattr(policy, "device", "cpu"))
        self.world = join_launched_world(device)
        if self.world.size > 1 and device.type == "cuda" and device.index != self.world.local_rank:
            raise ValueError(
                f"rank {self.world.rank} holds its policy on {device}, not on its own GPU "
                f"cuda:{self.world.local_rank}: join the process group "
                "(odyssey_core.rl.distributed.init_process_group) before building the policy"
            )
        self.callbacks = list(callbacks)  # called on rank 0 only
        self.reference = reference  # log pi_ref for a KL penalty
        self.generator = torch.Generator().manual_seed(config.seed)  # minibatch shuffling
        self.step = 0  # training steps completed
        self.turn_samples = 0  # turns collected by the completed steps, on all ranks

    def hook(self, name: str) -> TrainerHook:
        for hook in self.hooks:
            if hook.name == name:
                return hook
        raise KeyError(f"no hook named {name!r}; hooks: {[h.name for h in self.hooks]}")

    def _episode_starts(self) -> Starts:
        """The one hook's answer to ``episode_starts`` (None: the envs start as they are).
        Every hook is asked, since a hook may act before the rollout and answer None (weight
        sync pushes then); two that answer would each plan the episodes, so that is an error."""
        answers: list[tuple[str, Starts]] = []
        for hook in self.hooks:
            starts = hook.episode_starts(self)
            if starts is not None:
                answers.append((hook.name, starts))
        if len(answers) > 1:
            raise ValueError(
                f"hooks {[name for name, _ in answers]} all chose how this step's episodes "
                "start; only one hook may answer episode_starts (the others return None)"
            )
        return answers[0][1] if answers else None

    # -- one training step ----------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        c, step, world = self.config, self.step, self.world
        timing: dict[str, float] = {}
        started = time.perf_counter()

        planned = self._episode_starts()
        budget, starts = rank_budget(planned_budget(c.budget, planned), planned, world)
        seed = rank_seed(collection_seed(c.seed, step), world.rank)
        batch, rollout = self.collector.collect(budget, seed=seed, starts=starts)
        timing["rollout_s"] = time.perf_counter() - started
        metrics: dict[str, float] = {"step": float(step + 1)}
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
        union = gather_turns(batch)  # every rank's turns (in a world of one: this batch)
        self.turn_samples += len(union.batch)
        metrics["rollout/turn_samples_total"] = float(self.turn_samples)
        advantages, returns = self.estimator(union.batch, c.advantage)
        union = replace(
            union, batch=union.batch.with_fields(advantages=advantages, returns=returns)
        )
        batch = batch.with_fields(advantages=union.local(advantages), returns=union.local(returns))
        if values is not None:  # how well the value function knew this batch before fitting
            union_values = union.batch.values
            assert union_values is not None
            metrics["critic/explained_variance_pre"] = explained_variance(union_values, returns)
        metrics["adv/mean"] = float(advantages.mean())
        metrics["adv/std"] = float(advantages.std(correction=0))
        metrics["adv/nonzero_frac"] = float((advantages != 0).float().mean())

        t0 = time.perf_counter()
        if self.value_function is not None:
            metrics.update(self.value_function.fit(batch, batch.returns))
            if world.size > 1 and not self.value_function.in_graph:
                # each rank fitted on its own turns: average the networks (and their
                # optimiser states) so that every rank predicts with the same one
                state = average_state(self.value_function.state_dict())
                self.value_function.load_state_dict(state)
        timing["critic_train_s"] = time.perf_counter() - t0

        may_update = self.value_function is None or self.value_function.actor_may_update(step)
        metrics["actor/updated"] = float(may_update)
        if may_update:
            metrics.update(self._policy_update(batch, union, timing))

        for hook in self.hooks:
            metrics.update(hook.on_step_end(self, union.batch))
        metrics["actor/lr"] = self.updater.lr
        self.updater.end_of_step()

        critic_s = timing["critic_predict_s"] + timing["critic_train_s"]
        update_s = critic_s + timing.get("old_logprob_s", 0.0) + timing.get("actor_update_s", 0.0)
        timing["critic_share_of_update"] = critic_s / update_s if update_s > 0 else float("nan")
        timing["step_s"] = time.perf_counter() - started
        metrics.update({f"time/{k}": v for k, v in timing.items()})
        self.step += 1
        return mean_over_ranks(metrics)

    # -- the policy update ----------------------------------------------------------------------

    def _score(
        self, turns: TurnBatch, rows: list[int], entropies: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        return self.policy.score(
            [turns.prompt_ids[i] for i in rows],
            [turns.response_ids[i] for i in rows],
            take_frames(turns.frames, rows),  # frames on disk are read as they are scored
            self.config.temperature,
            self.config.score_micro_batch,
            **({} if entropies is None else {"entropies": entropies}),
        )

    def _policy_update(
        self, batch: TurnBatch, union: GatheredTurns, timing: dict[str, float]
    ) -> dict[str, float]:
        """Epochs of minibatches over the union's kept turns; this rank backpropagates its own
        turns of each minibatch (``batch``: this rank's turns, with their advantages)."""
        c, world = self.config, self.world
        advantages = union.batch.advantages
        assert advantages is not None and batch.advantages is not None
        lengths = union.response_lengths
        has_tokens = lengths > 0
        if c.skip_zero_advantage:
            kept = select_nonzero_advantage_turns(advantages)
            kept = kept[has_tokens[kept]]
        else:
            kept = torch.nonzero(has_tokens, as_tuple=False).flatten()
        if c.drop_episode_tail:  # after the advantages, which still see the whole episode
            kept = kept[~episode_tail_turns(union.batch.episode_ids, c.drop_episode_tail)[kept]]
        metrics = {"actor/skipped_turn_frac": 1.0 - kept.numel() / max(1, len(union.batch))}
        if kept.numel() == 0:
            return metrics
        # this rank's kept turns, in the union's order; position_of[j]: where kept[j] is in
        # ``turns`` (-1: another rank's turn)
        mine = (kept >= union.offset) & (kept < union.offset + union.size)
        turns = batch.select(kept[mine] - union.offset)
        position_of = torch.full((kept.numel(),), -1, dtype=torch.long)
        position_of[mine] = torch.arange(int(mine.sum()))
        everything = list(range(len(turns)))

        # Old log-probs: the current weights, before any update of this step (recomputed
        # rather than trusting the sampler's numbers; the gap is a metric).
        t0 = time.perf_counter()
        old: list[torch.Tensor] = []
        ref = None
        if c.policy_loss and everything:
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
        kept_lengths = lengths[kept]
        # a sampler's unit: the group (ESPO: one demonstrated episode and all its samples)
        # where the batch has groups, else the episode
        group_id = union.batch.group_id
        units = group_id[kept] if group_id is not None else union.batch.episode_ids[kept]
        # LoRA dropout (if any) acts in the update's forward passes only; old log-probs above
        # and rollouts run without it
        with lora_dropout_active(self.policy.model):
            for _ in range(c.epochs):
                for minibatch in self.sampler(units, c.minibatch_size, self.generator):
                    local = position_of[minibatch]
                    local = local[local >= 0]
                    pieces = list(_chunks(local, c.score_micro_batch)) if c.policy_loss else []
                    extras = [piece for hook in self.hooks for piece in hook.extra_losses(self)]
                    # every rank steps when any rank has something to backpropagate
                    backwards = max_over_ranks(len(pieces) + len(extras))
                    if backwards == 0:
                        continue
                    if not self.updater.equal_backwards:
                        backwards = len(pieces) + len(extras)
                    total = self.objective.units(kept_lengths[minibatch].tolist())
                    done = 0
                    for piece in pieces:
                        rows = piece.tolist()
                        loss, piece_metrics, piece_units = self._piece_loss(turns, rows, old, ref)
                        done += 1
                        # the updater averages over ranks: times the world size, the sum of every
                        # rank's share of the minibatch's units
                        share = piece_units / total * world.size
                        self.updater.backward(loss * share, done == backwards)
                        for key, value in piece_metrics.items():
                            sums[key] = sums.get(key, 0.0) + value * piece_units
                            weights[key] = weights.get(key, 0.0) + piece_units
                    if c.policy_loss:
                        units_seen += total
                    for extra in extras:
                        loss, extra_metrics = extra()
                        done += 1
                        self.updater.backward(loss, done == backwards)
                        for key, value in extra_metrics.items():
                            sums[key] = sums.get(key, 0.0) + value
                            weights[key] = weights.get(key, 0.0) + 1.0
                    while done < backwards:  # DeepSpeed needs as many backwards on every rank
                        done += 1
                        self.updater.backward(self._zero_loss(batch), done == backwards)
                    grad_norms.append(self.updater.step())
        timing["actor_update_s"] = time.perf_counter() - t0
        if world.size > 1:  # unit-weighted means over every rank's pieces
            sums = sum_over_ranks(sums)
            weights = sum_over_ranks(weights)
        metrics.update({k: v / weights[k] for k, v in sums.items()})
        if grad_norms:
            metrics["actor/grad_norm"] = float(np.mean(grad_norms))
        metrics["actor/updates"] = float(len(grad_norms))
        metrics["actor/turns"] = float(kept.numel())
        metrics["actor/tokens"] = float(kept_lengths.sum())
        if c.policy_loss:
            metrics[f"actor/{self.objective.unit}s_per_epoch"] = float(units_seen / c.epochs)
        return metrics

    def _zero_loss(self, batch: TurnBatch) -> torch.Tensor:
        """A loss of exactly 0 through one real scoring forward: a backward that touches the
        same weights in the same order as a real piece, for a rank with nothing (left) to
        backpropagate in a minibatch where another rank has."""
        rows = [i for i, r in enumerate(batch.response_ids) if r.numel() > 0][:1] or [0]
        with torch.enable_grad():
            scored = self._score(batch, rows)
        return torch.stack([s.sum() for s in scored]).sum() * 0.0

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
        if not self.world.is_main:  # the metrics are already means over ranks
            return
        self.metrics_log.append(metrics)
        for callback in self.callbacks:
            callback(self.step, metrics)

    def truncate_metrics(self) -> None:
        """Forget metric lines of steps after the checkpoint we resumed from (a killed run may
        have logged a step it never checkpointed; it will be logged again) and any line a
        crash or a full disk tore; the log is rewritten atomically."""
        if self.world.is_main:
            self.metrics_log.keep_through(self.step)

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
            "rank": self.world.rank,
            "world_size": self.world.size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved_world = int(state.get("world_size", 1))
        if saved_world != self.world.size:
            raise ValueError(
                f"the checkpoint was written by {saved_world} ranks, this run has "
                f"{self.world.size}: resume with the same number of processes"
            )
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
            self.load_state_dict(load_trainer_state(checkpoint, rank=self.world.rank))
            self.updater.load_engine(checkpoint)
            log.info("resumed from %s (step %d)", checkpoint, self.step)
        self.truncate_metrics()
        barrier()  # no rank starts a step before every rank has loaded
        return checkpoint

    def save(self) -> Path:
        path = save_checkpoint(
            self.out_dir,
            self.step,
            model=self.policy.model,
            processor=self.policy.processor,
            trainer_state=self.state_dict(),
            config=self.config.config_dump,
            extra_writer=self.updater.save_engine,
            world=self.world,
        )
        log.info("checkpoint %s", path)
        return path

    def close(self) -> None:
        close = getattr(self.collector.vector_env, "close", None)
        if close is not None:
            close()

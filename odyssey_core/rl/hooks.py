"""Trainer hooks that any recipe may use, and the rollout backend a run's settings ask for."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from odyssey_core.policy.base import PolicyBackend
from odyssey_core.policy.weight_sync import (
    RolloutBackendSettings,
    RolloutPolicy,
    SyncTarget,
    WeightSyncError,
    build_rollout_engine,
    export_weights,
    weights_checksum,
)
from odyssey_core.rl.distributed import barrier, current_world
from odyssey_core.rl.trainer import Trainer, TrainerHook
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import Starts

__all__ = ["CollapseMonitor", "WeightSync", "rollout_backend"]

log = logging.getLogger(__name__)


class CollapseMonitor(TrainerHook):
    """Thought-collapse signals (GTR Section 3) on every rollout: ``collapse/*`` metrics, and a
    warning when a threshold is crossed. ``report(batch)`` returns an object with ``metrics``
    (a dict) and ``warnings()``; each recipe parses its own answer format."""

    name = "collapse"

    def __init__(self, report: Callable[[TurnBatch], Any]) -> None:
        self.report = report

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        report = self.report(batch)
        for warning in report.warnings():
            log.warning("step %d thought collapse: %s", trainer.step + 1, warning)
        return {f"collapse/{key}": value for key, value in report.metrics.items()}


class WeightSync(TrainerHook):
    """Keeps a rollout engine on the trainer's weights: pushes them to ``target`` after every
    update (``on_step_end``), and once before the first rollout of a run or a resume
    (``episode_starts``, the hook called before each rollout), so the engine never samples
    with other weights than the trainer's.

    Every ``verify_every``-th push compares the engine's checksum with the trainer's own over
    the same exported weights (cast to the dtype the engine reports) and raises
    :class:`~odyssey_core.policy.weight_sync.WeightSyncError` on a mismatch. A colocated
    engine is put to sleep after each rollout (``on_batch``) and woken by the push. With
    several ranks, a shared engine (a server) is pushed to by rank 0 while the others wait.
    """

    name = "weight_sync"

    def __init__(
        self, target: SyncTarget, *, verify_every: int = 1, rollout: RolloutPolicy | None = None
    ) -> None:
        self.target = target
        self.verify_every = verify_every
        self.rollout = rollout
        self.pushes = 0
        self.synced = False

    def episode_starts(self, trainer: Trainer) -> Starts:
        if not self.synced:
            self._push(trainer)
        return None

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        metrics = self.rollout.pop_metrics() if self.rollout is not None else {}
        self.target.sleep()
        return metrics

    def on_step_end(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        return self._push(trainer)

    def _push(self, trainer: Trainer) -> dict[str, float]:
        model = trainer.policy.model
        verify = bool(self.verify_every) and self.pushes % self.verify_every == 0
        self.pushes += 1
        self.synced = True
        if self.target.shared and current_world().rank != 0:
            barrier()
            return {}
        report = self.target.push(model, verify=verify)
        metrics = {"weight_sync/seconds": report.seconds, "weight_sync/version": report.version}
        if verify:
            served, sent = report.served, report.sent
            if served is None:
                raise WeightSyncError("the engine reported no checksum for a verified push")
            expected = sent
            if expected is None or expected.dtype != served.dtype:
                expected = weights_checksum(export_weights(model), dtype=served.dtype)
            if expected.value != served.value:
                raise WeightSyncError(
                    f"after push {report.version} the engine serves other weights than the "
                    f"trainer's: engine {served.value} ({served.tensors} tensors, "
                    f"{served.dtype}), trainer {expected.value} ({expected.tensors} tensors)"
                )
            metrics["weight_sync/verified"] = 1.0
            metrics["weight_sync/bytes"] = float(served.bytes)
        barrier()
        return metrics


def rollout_backend(
    settings: RolloutBackendSettings, policy: Any, out_dir: str | Path
) -> tuple[PolicyBackend, list[TrainerHook]]:
    """The policy the Collector generates with, and the hooks that keep it in sync.

    ``hf``: the trainer's own ``policy`` and no hooks. ``vllm`` / ``openai``: a
    :class:`~odyssey_core.policy.weight_sync.RolloutPolicy` on that engine (prompt ids built
    by ``policy``, response ids from the engine) and a :class:`WeightSync` hook (unless
    ``sync`` is off). The trainer keeps scoring with ``policy`` either way.
    """
    if settings.kind == "hf":
        return policy, []
    rollout, target = build_rollout_engine(settings, policy, out_dir)
    if target is None:
        return rollout, []
    return rollout, [WeightSync(target, verify_every=settings.verify_every, rollout=rollout)]

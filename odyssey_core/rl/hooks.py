"""Trainer hooks that any recipe may use."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from odyssey_core.rl.trainer import Trainer, TrainerHook
from odyssey_core.rollout.batch import TurnBatch

__all__ = ["CollapseMonitor"]

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

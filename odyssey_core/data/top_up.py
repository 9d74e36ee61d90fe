"""Annotate until the dataset has exactly ``sampling.target_train_rows`` training rows.

The frames are taken in one fixed order: the first draw (``samples.parquet``) in
:func:`~odyssey_core.data.sampling.draw_order`, then the reserve (``reserve.parquet``, already
in that order). The dataset is the shortest prefix of that order holding the target's number
of training rows: rows that pass validation (:func:`~odyssey_core.data.validation.
failed_expectations`, the validate stage's own suite) and fall on the train side of the
frame-hash split (:func:`~odyssey_core.data.dataset.split_of`). Both verdicts depend on a row
alone, so the validate and build stages, run on that prefix, find exactly the target.

Rounds: label the first draw; while the training rows fall short, label as many more frames
as the yield so far says the shortfall needs; the last round's surplus is labelled but left out
(trimmed from the end of the order). A first draw that already holds more is trimmed the same
way. Answers are cached by the teacher (API teachers on disk, keyed by frame), and the rounds
are a function of the samples and the answers, so a rerun after a kill asks the teacher only
for frames it never answered. Walkthroughs that run out first raise :class:`TargetNotReached`
(or warn, with ``short_of_target: warn``), saying how far they got; the sample stage already
does when even a teacher whose every answer passed could not reach the target
(:func:`check_reachable`), before any request is paid for.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from odyssey_core.data.dataset import ANNOTATION_SCHEMA, split_of, write_json, write_table
from odyssey_core.data.sampling import SampledFrame, draw_order
from odyssey_core.data.teachers import ANNOTATIONS_FILE, Teacher, annotate_frames
from odyssey_core.data.validation import ValidationConfig, failed_expectations

__all__ = [
    "TOP_UP_FILE",
    "TargetNotReached",
    "TopUpReport",
    "annotate_to_target",
    "check_reachable",
]

log = logging.getLogger(__name__)

TOP_UP_FILE = "top_up.json"
#: the least yield (training rows per labelled frame) a round plans with, so a teacher whose
#: answers nearly all fail still draws a bounded number of frames per round
MIN_PLANNING_YIELD = 0.1
#: extra frames per round beyond the yield's estimate: a few more paid answers against one
#: more round (and one more validation pass)
ROUND_MARGIN = 0.02
#: counters summed over the rounds in teacher_metrics.json
SUMMED_METRICS = (
    "annotated",
    "failed",
    "refused",
    "cache_hits",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "cost_usd_saved_by_cache",
)


class TargetNotReached(RuntimeError):
    """The walkthroughs ran out of distinct frames before the target's training rows."""


@dataclass
class TopUpReport:
    """What the top-up did; written to ``top_up.json`` and the dataset's manifest."""

    target_train_rows: int
    train_rows: int
    val_rows: int
    quarantined: int
    frames_kept: int  # the prefix that becomes the dataset
    frames_labelled: int  # every frame the teacher answered, the trimmed surplus included
    first_draw: int
    reserve: int
    rounds: list[int] = field(default_factory=list)  # frames labelled per round
    reached: bool = True

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_reachable(
    frames: Sequence[SampledFrame],
    *,
    target: int,
    val_share: float,
    short_of_target: Literal["error", "warn"] = "error",
    more_frames: str = "record more walkthroughs",
) -> int:
    """Before any teacher request: the most training rows ``frames`` (the first draw and the
    reserve) can give is the count on the train side of the frame-hash split; below the
    target, raise :class:`TargetNotReached` (or warn). Returns that count."""
    ceiling = sum(1 for f in frames if split_of(f.frame_hash, val_share) == "train")
    if ceiling < target:
        message = (
            f"the walkthroughs hold {len(frames)} distinct frames, {ceiling} of them on the "
            f"train side of the split (val_share {val_share}): fewer than the {target} "
            f"training rows sampling.target_train_rows asks for, whatever the teacher answers. "
            f"To reach it, {more_frames}, or lower sampling.target_train_rows "
            "(short_of_target: warn keeps the rows reached)"
        )
        if short_of_target == "error":
            raise TargetNotReached(message)
        log.warning(message)
    return ceiling


def _sum_metrics(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for metrics in rounds:
        for name, value in metrics.items():
            counted = name in SUMMED_METRICS or name.startswith("http_")
            if counted and isinstance(value, int | float):
                total[name] = total.get(name, 0) + value
    failures: dict[str, str] = {}
    for metrics in rounds:
        failures.update(metrics.get("failures") or {})
    return {**total, "failures": failures}


def annotate_to_target(
    teacher: Teacher,
    first_draw: Sequence[SampledFrame],
    reserve: Sequence[SampledFrame],
    frames_root: str | Path,
    out_dir: str | Path,
    *,
    target: int,
    val_share: float,
    validation: ValidationConfig,
    game: str,
    short_of_target: Literal["error", "warn"] = "error",
    more_frames: str = "record more walkthroughs",
) -> tuple[list[dict[str, Any]], TopUpReport]:
    """Label frames in draw order until the prefix holds ``target`` training rows; writes
    ``annotations.parquet`` (that prefix's rows, in draw order), ``teacher_metrics.json``
    (summed over the rounds, with ``top_up``) and ``top_up.json``. ``more_frames`` is the
    advice an exhausted run gives (which settings record or import more)."""
    out = Path(out_dir)
    order = draw_order(first_draw) + list(reserve)
    rows: list[dict[str, Any]] = []
    round_metrics: list[dict[str, Any]] = []
    rounds: list[int] = []
    planned = len(first_draw)
    while True:
        batch = order[len(rows) : planned]
        if batch:
            new_rows, metrics = annotate_frames(teacher, batch, frames_root, out)
            by_hash = {row["frame_hash"]: row for row in new_rows}
            rows += [by_hash[frame.frame_hash] for frame in batch]  # in draw order
            round_metrics.append(metrics)
            rounds.append(len(batch))
        failed = failed_expectations(rows, frames_root, validation, game=game)
        train = [
            position
            for position, row in enumerate(rows)
            if position not in failed and split_of(str(row["frame_hash"]), val_share) == "train"
        ]
        if len(train) >= target or len(rows) == len(order):
            break
        shortfall = target - len(train)
        rate = max(len(train) / max(1, len(rows)), MIN_PLANNING_YIELD)
        planned = min(len(order), len(rows) + math.ceil(shortfall / rate * (1 + ROUND_MARGIN)))
    reached = len(train) >= target
    kept = rows[: train[target - 1] + 1] if reached else rows
    quarantined = sum(1 for position in failed if position < len(kept))
    train_kept = min(len(train), target)
    report = TopUpReport(
        target_train_rows=target,
        train_rows=train_kept,
        val_rows=len(kept) - quarantined - train_kept,
        quarantined=quarantined,
        frames_kept=len(kept),
        frames_labelled=len(rows),
        first_draw=len(first_draw),
        reserve=len(reserve),
        rounds=rounds,
        reached=reached,
    )
    write_table(out / ANNOTATIONS_FILE, kept, schema=ANNOTATION_SCHEMA)
    metrics = {**_sum_metrics(round_metrics), "top_up": report.to_json()}
    write_json(out / "teacher_metrics.json", metrics)
    write_json(out / TOP_UP_FILE, report.to_json())
    if not reached:
        message = (
            f"curation reached {train_kept} of the {target} training rows that "
            f"sampling.target_train_rows asks for: every distinct frame of the walkthroughs is "
            f"labelled ({len(rows)} frames: {quarantined} quarantined, {report.val_rows} held "
            f"out for validation at val_share {val_share}). To reach it, {more_frames}, or "
            "lower sampling.target_train_rows (short_of_target: warn keeps the rows reached)"
        )
        if short_of_target == "error":
            raise TargetNotReached(message)
        log.warning(message)
    return kept, report

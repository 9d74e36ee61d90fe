"""`nightly-eval`: re-evaluate a recipe's champion (and a waiting candidate) every night, keep the
scores as an MLflow time series, and fail loudly when the champion regresses.

One flow for every recipe's registered model: ``recipe="odysseus"`` (odland, mario: the score is
the mean progress of ``configs/pipeline/<preset>.yaml``'s suite) and ``recipe="gtr"`` (points24,
numberline: the per-episode ``promotion.metric`` of ``configs/gtr_pipeline/<preset>.yaml``, on
the evaluation's fixed deals) and ``recipe="espo"`` (the per-episode ``promotion.metric`` of
``configs/espo_pipeline/<preset>.yaml`` on its test episodes). A regression emits
:data:`REGRESSION_EVENT`, which the ``odyssey-champion-regressed`` Automation
(:mod:`flows.automations`) turns into a notification."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from prefect import flow
from prefect.events import emit_event

from odyssey_core.recipes.odysseus.pipeline import nightly_table
from tasks.common import post_report
from tasks.espo import espo_nightly_task
from tasks.gtr import gtr_nightly_task
from tasks.odysseus import nightly_task

REGRESSION_EVENT = "odyssey.champion.regressed"


class ChampionRegressedError(RuntimeError):
    """The champion scored below its recorded score by more than the configured margin."""


def _table(result: Mapping[str, Any]) -> str:
    table = nightly_table(result)
    metric = result.get("metric", "mean_progress")
    return table.replace("mean progress", metric.replace("_", " "), 1)


def _with_margin(overrides: dict[str, Any] | None, margin: float | None) -> dict[str, Any]:
    merged = dict(overrides or {})
    if margin is not None:
        merged["promotion"] = {**merged.get("promotion", {}), "nightly_margin": margin}
    return merged


@flow(name="nightly-eval", log_prints=True)
def nightly_eval_flow(
    preset: str = "tiny",
    overrides: dict[str, Any] | None = None,
    recipe: Literal["odysseus", "gtr", "espo"] = "odysseus",
    margin: float | None = None,
) -> dict[str, Any]:
    """Re-evaluate the champion of ``recipe``'s preset; ``margin`` (None: the preset's) is how
    far below its recorded score it may fall before the run fails and emits the event."""
    if recipe == "gtr":
        result = gtr_nightly_task(preset, overrides, margin)
    elif recipe == "espo":
        result = espo_nightly_task(preset, overrides, margin)
    else:
        result = nightly_task(
            preset, _with_margin(overrides, margin) if margin is not None else overrides
        )
    metric = result.get("metric", "mean_progress")
    print("nightly-eval:\n" + _table(result))
    for label, row in result["evaluated"].items():  # each model's full report on the run page
        post_report(row, f"nightly-{result['model_name']}-{label}", f"v{row['version']}")
    if result["regressed"]:
        emit_event(
            event=REGRESSION_EVENT,
            resource={
                "prefect.resource.id": f"odyssey.model.{result['model_name']}",
                "odyssey.version": str(result["champion"]),
            },
            payload={
                **{
                    k: result[k]
                    for k in ("recorded", "current", "margin", "champion", "model_name")
                },
                "metric": metric,
                "recipe": recipe,
                "preset": preset,
            },
        )
        raise ChampionRegressedError(
            f"{result['model_name']} v{result['champion']}: {metric.replace('_', ' ')}"
            f" {result['current']:.4g} is below its recorded {result['recorded']:.4g} by more"
            f" than {result['margin']:g}"
        )
    return result


if __name__ == "__main__":
    nightly_eval_flow()

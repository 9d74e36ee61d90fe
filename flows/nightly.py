"""`nightly-eval`: re-evaluate a recipe's champion (and a waiting candidate) every night, keep the
scores as an MLflow time series, and fail loudly when the champion regresses.

One flow for every recipe's registered model: ``recipe`` is a name in
:data:`odyssey_core.recipe.RECIPES` and ``preset`` one of its pipeline presets; the recipe's
``nightly_evaluate`` scores the champion as its pipeline's evaluation does (Odysseus: the mean
progress on the suite; GTR: the per-episode ``promotion.metric`` on the evaluation's fixed
deals; ESPO: the per-episode ``promotion.metric`` on its test episodes). A regression emits
:data:`REGRESSION_EVENT`, which the ``odyssey-champion-regressed`` Automation
(:mod:`flows.automations`) turns into a notification."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect import flow
from prefect.events import emit_event

from odyssey_core.stages import nightly_table
from tasks.common import nightly_task, post_report

REGRESSION_EVENT = "odyssey.champion.regressed"


class ChampionRegressedError(RuntimeError):
    """The champion scored below its recorded score by more than the configured margin."""


def _table(result: Mapping[str, Any]) -> str:
    table = nightly_table(result)
    metric = result.get("metric", "mean_progress")
    return table.replace("mean progress", metric.replace("_", " "), 1)


@flow(name="nightly-eval", log_prints=True)
def nightly_eval_flow(
    preset: str = "tiny",
    overrides: dict[str, Any] | None = None,
    recipe: str = "odysseus",
    margin: float | None = None,
) -> dict[str, Any]:
    """Re-evaluate the champion of ``recipe``'s preset; ``margin`` (None: the preset's) is how
    far below its recorded score it may fall before the run fails and emits the event."""
    result = nightly_task(recipe, preset, overrides, margin)
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

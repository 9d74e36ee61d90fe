"""`nightly-eval`: re-evaluate the champion (and a waiting candidate) every night, keep the means
as an MLflow time series, and fail loudly when the champion regresses."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.events import emit_event

from odyssey_core.recipes.odysseus.pipeline import nightly_table
from tasks.odysseus import nightly_task

REGRESSION_EVENT = "odyssey.champion.regressed"


class ChampionRegressedError(RuntimeError):
    """The champion scored below its recorded score by more than the configured margin."""


@flow(name="nightly-eval", log_prints=True)
def nightly_eval_flow(
    preset: str = "tiny", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    result = nightly_task(preset, overrides)
    print("nightly-eval:\n" + nightly_table(result))
    if result["regressed"]:
        emit_event(
            event=REGRESSION_EVENT,
            resource={
                "prefect.resource.id": f"odyssey.model.{result['model_name']}",
                "odyssey.version": str(result["champion"]),
            },
            payload={
                k: result[k] for k in ("recorded", "current", "margin", "champion", "model_name")
            },
        )
        raise ChampionRegressedError(
            f"{result['model_name']} v{result['champion']}: mean progress {result['current']:.4g}"
            f" is below its recorded {result['recorded']:.4g} by more than {result['margin']:g}"
        )
    return result


if __name__ == "__main__":
    nightly_eval_flow()

"""`nightly-eval`: re-evaluate the champion (and a waiting candidate) every night, keep the means
as an MLflow time series, and fail loudly when the champion regresses."""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.events import emit_event

from odyssey_core.pipeline import load_pipeline_config, nightly_evaluate
from tasks.pipeline import retry_on_transient

REGRESSION_EVENT = "odyssey.champion.regressed"


class ChampionRegressedError(RuntimeError):
    """The champion scored below its recorded score by more than the configured margin."""


@task(
    name="nightly-evaluate",
    timeout_seconds=12 * 3600,
    retries=2,
    retry_delay_seconds=60,
    retry_condition_fn=retry_on_transient,
)
def nightly_task(preset: str, overrides: dict[str, Any] | None) -> dict[str, Any]:
    # no cache: the point is to evaluate again every night
    return nightly_evaluate(load_pipeline_config(preset, overrides), log_fn=print)


@flow(name="nightly-eval", log_prints=True)
def nightly_eval_flow(
    preset: str = "tiny", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    result = nightly_task(preset, overrides)
    rows = ["| model | version | mean progress |", "|---|---|---|"]
    for label, row in result["evaluated"].items():
        rows.append(f"| {label} | {row['version']} | {row['mean']:.4g} |")
    rows.append(f"| champion (recorded) | {result['champion']} | {result['recorded']:.4g} |")
    print("nightly-eval:\n" + "\n".join(rows))
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

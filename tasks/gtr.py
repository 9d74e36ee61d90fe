"""One Prefect task per GTR pipeline stage, thin over :mod:`odyssey_core.recipes.gtr.pipeline`.

Retries and caching are the Odysseus tasks' (:data:`tasks.common.STAGE_TASK`): retries only for
transient failures, Prefect's input cache first, then the stage's own done marker.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from odyssey_core.recipes.gtr import pipeline
from odyssey_core.recipes.gtr.pipeline import GTRPipelineConfig
from tasks.common import STAGE_TASK, post_report, retry_on_transient

__all__ = [
    "gtr_evaluate_task",
    "gtr_nightly_task",
    "gtr_register_task",
    "gtr_sft_task",
    "gtr_train_task",
]


# the SFT initialisation as its own task: its own timeout and retries; the train stage then
# finds its done marker
gtr_sft_task = task(name="gtr-sft", timeout_seconds=24 * 3600, **STAGE_TASK)(pipeline.stage_gtr_sft)
# a retry continues from the last GTR checkpoint (the stage trains with resume=True)
gtr_train_task = task(name="gtr-train", timeout_seconds=72 * 3600, **STAGE_TASK)(
    pipeline.stage_gtr_train
)


@task(name="gtr-evaluate", timeout_seconds=12 * 3600, **STAGE_TASK)
def gtr_evaluate_task(
    cfg: GTRPipelineConfig, checkpoint_uri: str, parent_run_id: str | None = None
) -> dict[str, Any]:
    outputs = pipeline.stage_gtr_evaluate(cfg, checkpoint_uri, parent_run_id=parent_run_id)
    # success rate, return and collapse metrics on the flow run's page
    post_report(outputs, f"gtr-evaluation-{cfg.name}", checkpoint_uri)
    return outputs


gtr_register_task = task(name="gtr-register", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_gtr_register
)


@task(
    name="nightly-evaluate-gtr",
    timeout_seconds=12 * 3600,
    retries=2,
    retry_delay_seconds=60,
    retry_condition_fn=retry_on_transient,
)
def gtr_nightly_task(
    preset: str, overrides: dict[str, Any] | None, margin: float | None = None
) -> dict[str, Any]:
    # no cache: the point is to evaluate again every night
    return pipeline.nightly_evaluate(
        pipeline.load_gtr_pipeline_config(preset, overrides), margin=margin, log_fn=print
    )

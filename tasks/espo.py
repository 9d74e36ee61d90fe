"""One Prefect task per ESPO pipeline stage, thin over :mod:`odyssey_core.recipes.espo.pipeline`.

Retries and caching are the other recipes' (:data:`tasks.common.STAGE_TASK`): retries only for
transient failures, Prefect's input cache first, then the stage's own done marker.
"""

from __future__ import annotations

from prefect import task

from odyssey_core.recipes.espo import pipeline
from tasks.common import STAGE_TASK

__all__ = [
    "espo_data_task",
    "espo_evaluate_task",
    "espo_register_task",
    "espo_sft_task",
    "espo_train_task",
]

espo_data_task = task(name="espo-data", timeout_seconds=6 * 3600, **STAGE_TASK)(
    pipeline.stage_espo_data
)
espo_sft_task = task(name="espo-sft", timeout_seconds=24 * 3600, **STAGE_TASK)(
    pipeline.stage_espo_sft
)
# a retry continues from the last ESPO checkpoint (the stage trains with resume=True)
espo_train_task = task(name="espo-train", timeout_seconds=72 * 3600, **STAGE_TASK)(
    pipeline.stage_espo_train
)
# the flow posts its report on the flow run's page
espo_evaluate_task = task(name="espo-evaluate", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_espo_evaluate
)
espo_register_task = task(name="espo-register", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_espo_register
)

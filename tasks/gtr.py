"""One Prefect task per GTR pipeline stage, thin over :mod:`odyssey_core.recipes.gtr.pipeline`.

Retries and caching are the Odysseus tasks' (:data:`tasks.common.STAGE_TASK`): retries only for
transient failures, Prefect's input cache first, then the stage's own done marker.
"""

from __future__ import annotations

from prefect import task

from odyssey_core.recipes.gtr import pipeline
from tasks.common import STAGE_TASK

__all__ = [
    "gtr_evaluate_task",
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


# the flow posts its report on the flow run's page
gtr_evaluate_task = task(name="gtr-evaluate", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_gtr_evaluate
)


gtr_register_task = task(name="gtr-register", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_gtr_register
)

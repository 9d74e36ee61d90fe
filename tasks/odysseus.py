"""One Prefect task per Odysseus pipeline stage, thin over
:mod:`odyssey_core.recipes.odysseus.pipeline`: the five curation stages (record walkthroughs,
sample frames, annotate, validate, build the dataset), then SFT, RL, evaluation and promotion.
Each passes URIs and small numbers, never datasets; retries and caching are
:data:`tasks.common.STAGE_TASK`'s. The nightly evaluation is every recipe's
(:func:`tasks.common.nightly_task`).
"""

from __future__ import annotations

from prefect import task

from odyssey_core.recipes.odysseus import pipeline
from tasks.common import STAGE_TASK

__all__ = [
    "annotate_task",
    "build_dataset_task",
    "evaluate_task",
    "promote_task",
    "record_walkthroughs_task",
    "rl_task",
    "sample_frames_task",
    "sft_task",
    "validate_task",
]


# The stages pass through as they are: each already takes the config, its input URIs and the
# parent MLflow run id, and returns a small dict.
record_walkthroughs_task = task(name="record-walkthroughs", timeout_seconds=4 * 3600, **STAGE_TASK)(
    pipeline.stage_record
)
sample_frames_task = task(name="sample-frames", timeout_seconds=2 * 3600, **STAGE_TASK)(
    pipeline.stage_sample
)
# The one stage that talks to a teacher API. Its backend already retries 429/5xx/connection
# errors per request with backoff; what still escapes as a transient error (and store errors
# while fetching or publishing) is retried here, paying only for frames the teacher's response
# cache does not hold yet. Frames the teacher gave up on come back as one TeacherError chained
# to the first HTTP error: a rate limit or 5xx is retried, a bad key or unknown model is not.
annotate_task = task(name="annotate", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_annotate
)
# Too many failing rows raise ValidationFailed: deterministic, so retry_on_transient declines
# and the flow fails at once with the report in MLflow.
validate_task = task(name="validate", timeout_seconds=2 * 3600, **STAGE_TASK)(
    pipeline.stage_validate
)
build_dataset_task = task(name="build-dataset", timeout_seconds=2 * 3600, **STAGE_TASK)(
    pipeline.stage_build_dataset
)
sft_task = task(name="sft", timeout_seconds=24 * 3600, **STAGE_TASK)(pipeline.stage_sft)
# a retry continues from the last RL checkpoint (the stage trains with resume=True)
rl_task = task(name="rl-train", timeout_seconds=72 * 3600, **STAGE_TASK)(pipeline.stage_rl)
promote_task = task(name="promote", timeout_seconds=12 * 3600, **STAGE_TASK)(pipeline.stage_promote)


# the flow posts its report on the flow run's page
evaluate_task = task(name="evaluate", timeout_seconds=12 * 3600, **STAGE_TASK)(
    pipeline.stage_evaluate
)

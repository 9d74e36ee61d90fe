"""One Prefect task per pipeline stage, thin over :mod:`odyssey_core.pipeline`: the five
curation stages (record walkthroughs, sample frames, annotate, validate, build the dataset),
then SFT, RL, evaluation and promotion. Each passes URIs and small numbers, never datasets.

Two layers make a rerun cheap: Prefect's result cache (keyed on the task inputs, results
persisted under ``PREFECT_HOME``) skips a task whose inputs it has seen, and the stage's own
done marker skips the work when the cache is cold (a new Prefect home, another worker).
Retries are only for transient failures: a deterministic error (a bad config, a shape
mismatch) fails at once instead of burning three more hours of RL.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect import Task, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import INPUTS
from prefect.client.schemas.objects import TaskRun
from prefect.states import State

from odyssey_core import pipeline
from odyssey_core.pipeline import PipelineConfig

__all__ = [
    "annotate_task",
    "build_dataset_task",
    "evaluate_task",
    "is_transient_error",
    "post_report",
    "promote_task",
    "record_walkthroughs_task",
    "retry_on_transient",
    "rl_task",
    "sample_frames_task",
    "sft_task",
    "validate_task",
]

# The MLflow parent run differs on every flow run; it must not change the cache key.
CACHE = INPUTS - "parent_run_id"

_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
}
# errno values of network trouble (connection refused/reset/aborted, unreachable, timed out)
_NETWORK_ERRNOS = {32, 101, 103, 104, 110, 111, 112, 113}


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def is_transient_error(exc: BaseException) -> bool:
    """Worth retrying: network errors, S3 5xx/throttling, the openai backend's retryable
    statuses (it already retried; a later attempt may still succeed). Checks the cause chain."""
    for err in _chain(exc):
        if isinstance(err, ConnectionError | TimeoutError):
            return True
        if isinstance(err, OSError) and err.errno in _NETWORK_ERRNOS:
            return True
        try:
            from botocore.exceptions import ClientError
            from botocore.exceptions import ConnectionError as BotoConnectionError
        except ImportError:  # pragma: no cover - botocore is a dependency, but stay tolerant
            ClientError = BotoConnectionError = ()  # type: ignore[assignment,misc]
        if BotoConnectionError and isinstance(err, BotoConnectionError):
            return True
        if ClientError and isinstance(err, ClientError):
            response = err.response or {}
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _TRANSIENT_CODES or (isinstance(status, int) and status >= 500):
                return True
        from odyssey_core.policy.openai_backend import OpenAIBackendError

        if isinstance(err, OpenAIBackendError):
            status = err.status_code
            # None: connection/timeout errors that used up the backend's own retries
            if status is None or status in (408, 409, 429) or status >= 500:
                return True
    return False


def retry_on_transient(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Prefect ``retry_condition_fn``: retry only when the failure was transient."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            exc = state.result(raise_on_failure=False)  # type: ignore[assignment]
        except Exception:  # an unreadable result: do not retry blindly
            return False
    return isinstance(exc, BaseException) and is_transient_error(exc)


_COMMON: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": [30, 120],
    "retry_condition_fn": retry_on_transient,
    "cache_policy": CACHE,
    "persist_result": True,
}


@task(name="record-walkthroughs", timeout_seconds=4 * 3600, **_COMMON)
def record_walkthroughs_task(
    cfg: PipelineConfig, parent_run_id: str | None = None
) -> dict[str, Any]:
    return pipeline.stage_record(cfg, parent_run_id=parent_run_id)


@task(name="sample-frames", timeout_seconds=2 * 3600, **_COMMON)
def sample_frames_task(
    cfg: PipelineConfig, walkthroughs_uri: str, parent_run_id: str | None = None
) -> dict[str, Any]:
    return pipeline.stage_sample(cfg, walkthroughs_uri, parent_run_id=parent_run_id)


# The one stage that talks to a teacher API. Its backend already retries 429/5xx/connection
# errors per request with backoff; what still escapes as a transient error (and store errors
# while fetching or publishing) is retried here, paying only for frames the teacher's response
# cache does not hold yet. Frames the teacher gave up on come back as one TeacherError chained
# to the first HTTP error: a rate limit or 5xx is retried, a bad key or unknown model is not.
@task(name="annotate", timeout_seconds=12 * 3600, **_COMMON)
def annotate_task(
    cfg: PipelineConfig, samples_uri: str, parent_run_id: str | None = None
) -> dict[str, Any]:
    return pipeline.stage_annotate(cfg, samples_uri, parent_run_id=parent_run_id)


# Too many failing rows raise ValidationFailed: deterministic, so retry_on_transient declines
# and the flow fails at once with the report in MLflow.
@task(name="validate", timeout_seconds=2 * 3600, **_COMMON)
def validate_task(
    cfg: PipelineConfig,
    annotations_uri: str,
    samples_uri: str,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    return pipeline.stage_validate(cfg, annotations_uri, samples_uri, parent_run_id=parent_run_id)


@task(name="build-dataset", timeout_seconds=2 * 3600, **_COMMON)
def build_dataset_task(
    cfg: PipelineConfig,
    validation_uri: str,
    samples_uri: str,
    annotations_uri: str,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    return pipeline.stage_build_dataset(
        cfg, validation_uri, samples_uri, annotations_uri, parent_run_id=parent_run_id
    )


@task(name="sft", timeout_seconds=24 * 3600, **_COMMON)
def sft_task(
    cfg: PipelineConfig, dataset_uri: str, parent_run_id: str | None = None
) -> dict[str, Any]:
    return pipeline.stage_sft(cfg, dataset_uri, parent_run_id=parent_run_id)


@task(name="rl-train", timeout_seconds=72 * 3600, **_COMMON)
def rl_task(
    cfg: PipelineConfig, model_uri: str, parent_run_id: str | None = None
) -> dict[str, Any]:
    # a retry continues from the last RL checkpoint (the stage trains with resume=True)
    return pipeline.stage_rl(cfg, model_uri, parent_run_id=parent_run_id)


def post_report(outputs: Mapping[str, Any], key: str, checkpoint_uri: str) -> None:
    """Show a stage's Markdown report (``outputs["report_markdown"]``) on the flow run's page."""
    report = Path(outputs.get("report_markdown", ""))
    if report.is_file():
        create_markdown_artifact(
            key=key.lower().replace("_", "-"),
            markdown=report.read_text(),
            description=f"evaluation of {checkpoint_uri}",
        )


@task(name="evaluate", timeout_seconds=12 * 3600, **_COMMON)
def evaluate_task(
    cfg: PipelineConfig, checkpoint_uri: str, parent_run_id: str | None = None
) -> dict[str, Any]:
    outputs = pipeline.stage_evaluate(cfg, checkpoint_uri, parent_run_id=parent_run_id)
    post_report(outputs, f"evaluation-{cfg.name}", checkpoint_uri)  # the Table-2 style report
    return outputs


@task(name="promote", timeout_seconds=12 * 3600, **_COMMON)
def promote_task(
    cfg: PipelineConfig,
    checkpoint_uri: str,
    evaluation: Mapping[str, Any],
    base_model_uri: str,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    return pipeline.stage_promote(
        cfg, checkpoint_uri, evaluation, base_model_uri, parent_run_id=parent_run_id
    )

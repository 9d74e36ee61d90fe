"""What every recipe's Prefect tasks share: the retry condition (transient failures only), the
cache policy and the retry/cache settings, and posting a stage's report on the flow run's page.

Two layers make a rerun cheap: Prefect's result cache (keyed on the task inputs, results
persisted under ``PREFECT_HOME``) skips a task whose inputs it has seen, and the stage's own
done marker (:func:`odyssey_core.stages.run_stage`) skips the work when the cache is cold (a
new Prefect home, another worker). Retries are only for transient failures: a deterministic
error (a bad config, a shape mismatch) fails at once instead of burning three more hours of RL.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect import Task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import INPUTS
from prefect.client.schemas.objects import TaskRun
from prefect.states import State

__all__ = ["CACHE", "STAGE_TASK", "is_transient_error", "post_report", "retry_on_transient"]

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


# The options of every stage task: retries only for transient failures, Prefect's input cache
# first, then the stage's own done marker.
STAGE_TASK: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": [30, 120],
    "retry_condition_fn": retry_on_transient,
    "cache_policy": CACHE,
    "persist_result": True,
}


def post_report(outputs: Mapping[str, Any], key: str, checkpoint_uri: str) -> None:
    """Show a stage's Markdown report (``outputs["report_markdown"]``) on the flow run's page."""
    report = Path(outputs.get("report_markdown", ""))
    if report.is_file():
        create_markdown_artifact(
            key=key.lower().replace("_", "-"),
            markdown=report.read_text(),
            description=f"evaluation of {checkpoint_uri}",
        )

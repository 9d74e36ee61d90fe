"""What every recipe's Prefect tasks share: the retry condition (transient failures only), the
cache policy and the retry/cache settings, and posting a stage's report on the flow run's page.

Two layers make a rerun cheap: Prefect's result cache (results persisted under
``PREFECT_HOME``) skips a task whose inputs it has seen, and the stage's own done marker
(:func:`odyssey_core.stages.run_stage`) skips the work when the cache is cold (a new Prefect
home, another worker). The cache key is :func:`stage_cache_key`: the inputs with every store URI
replaced by the publication it holds now (a stage's URI stays the same when its stage reruns,
so keying on URIs would answer for stale weights), and it expires after ``CACHE_EXPIRATION``.
Retries are only for transient failures: a deterministic error (a bad config, a shape
mismatch) fails at once instead of burning three more hours of RL.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from prefect import Task, task
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.objects import TaskRun
from prefect.context import TaskRunContext
from prefect.states import State
from pydantic import BaseModel

from odyssey_core.recipe import RECIPES
from odyssey_core.stages import RunConfig, fingerprint, publication, run_folder_id

__all__ = [
    "CACHE_EXPIRATION",
    "NIGHTLY_TASK",
    "STAGE_TASK",
    "is_transient_error",
    "nightly_task",
    "post_report",
    "retry_on_transient",
    "stage_cache_key",
]

#: how long Prefect's result cache may answer for a stage before it runs again (the stage's done
#: marker still skips the work when nothing changed)
CACHE_EXPIRATION = timedelta(days=7)


def _published(cfg: RunConfig | None, value: Any) -> Any:
    """``value`` with each store URI replaced by the publication it holds now."""
    if isinstance(value, str) and "://" in value and cfg is not None:
        try:
            return {"uri": value, "publication": publication(cfg, value)}
        except Exception:  # not a published folder (a file, a local path): the URI itself
            return value
    if isinstance(value, Mapping):
        return {k: _published(cfg, v) for k, v in value.items()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def stage_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    """The task, its config, its inputs as published now and the run folder's identity (a
    removed run folder takes its cached answers with it); the MLflow parent run (new on every
    flow run) is left out."""
    cfg = parameters.get("cfg")
    cfg = cfg if isinstance(cfg, RunConfig) else None
    inputs = {k: _published(cfg, v) for k, v in parameters.items() if k != "parent_run_id"}
    folder = run_folder_id(cfg) if cfg is not None else None
    return f"{context.task.name}-{fingerprint(inputs, folder)}"


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
    statuses (it already retried; a later attempt may still succeed), a training launcher
    whose rank was killed by a signal. Checks the cause chain."""
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
        from odyssey_core.launch import LaunchError
        from odyssey_core.policy.openai_backend import OpenAIBackendError

        # a rank killed by a signal (preemption, the OOM killer) may well succeed on a retry,
        # which resumes from the last complete checkpoint; a rank's own error exits non-zero
        if isinstance(err, LaunchError) and err.exitcode < 0:
            return True
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
    "cache_key_fn": stage_cache_key,
    "cache_expiration": CACHE_EXPIRATION,
    "persist_result": True,
}

# The options of every nightly evaluation task: retried on transient failures, never cached (the
# point is to evaluate again every night).
NIGHTLY_TASK: dict[str, Any] = {
    "timeout_seconds": 12 * 3600,
    "retries": 2,
    "retry_delay_seconds": 60,
    "retry_condition_fn": retry_on_transient,
}


def post_report(outputs: Mapping[str, Any], key: str, checkpoint_uri: str) -> None:
    """Show a stage's Markdown report (``outputs["report_markdown"]``) on the flow run's page,
    with links to the published report folder (its plots and videos are files beside it)."""
    report = Path(outputs.get("report_markdown", ""))
    if report.is_file():
        markdown = report.read_text()
        folder = outputs.get("report_uri")
        if folder:
            files = sorted(
                str(p.relative_to(report.parent))
                for p in report.parent.rglob("*")
                if p.suffix in {".png", ".mp4", ".html"}
            )
            markdown += f"\n\n## Files\n\nThe whole report is published at `{folder}`:\n\n"
            markdown += "".join(f"- `{folder.rstrip('/')}/{name}`\n" for name in files)
        create_markdown_artifact(
            key=key.lower().replace("_", "-"),
            markdown=markdown,
            description=f"evaluation of {checkpoint_uri}",
        )


@task(name="nightly-evaluate", **NIGHTLY_TASK)
def nightly_task(
    recipe: str, preset: str, overrides: dict[str, Any] | None, margin: float | None = None
) -> dict[str, Any]:
    """Re-evaluate the champion of ``recipe``'s pipeline preset (its ``nightly_evaluate``);
    ``margin`` (None: the preset's ``promotion.nightly_margin``)."""
    chosen = RECIPES.get(recipe)
    cfg = chosen.load_pipeline(preset, overrides)
    return chosen.nightly_evaluate(cfg, margin=margin, log_fn=print)

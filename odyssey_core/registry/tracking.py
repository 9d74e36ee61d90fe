"""MLflow tracking: one experiment per flow, one parent run per flow run, a nested run per stage.

``Tracker`` talks to MLflow through ``MlflowClient`` with explicit run ids, never through the
fluent ``mlflow.start_run`` global, because Prefect runs tasks in threads (and processes) and
the fluent API keeps one active run per process. Nesting follows the active run of the calling
thread, or an explicit ``parent_run_id`` (what a Prefect task in another process receives).

    tracker = Tracker("sqlite:///out/mlflow/mlflow.db", "odyssey/train_odysseus")
    with tracker.run("odland-2026-12-01", params=config) as flow_run:
        with tracker.stage_run("sft") as sft:
            sft.log_metrics({"loss": 0.7}, step=10)
            sft.log_artifact_ref("checkpoint", "s3://odyssey/runs/.../checkpoint")

Large outputs (checkpoints, datasets) live in the artifact store; a run records their URIs as
tags (``log_artifact_ref``) and keeps only small files (plots, videos, reports) as MLflow
artifacts. For an ``s3://`` MLflow artifact root, MLflow reads ``MLFLOW_S3_ENDPOINT_URL`` and
the standard AWS credential variables.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from odyssey_core.common.redaction import redact_uri, summarise_error

if TYPE_CHECKING:
    from mlflow import MlflowClient

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# MLflow's limits (mlflow.utils.validation); kept here so the module imports without MLflow.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250
_PARAMS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /:]")

PARENT_TAG = "mlflow.parentRunId"
STAGE_TAG = "odyssey.stage"


def clean_key(key: str) -> str:
    """A key MLflow accepts: unsupported characters become '_', length capped."""
    return _BAD_KEY_CHARS.sub("_", key)[:MAX_KEY]


def _param_value(value: Any) -> str:
    if isinstance(value, list | tuple | set | frozenset):
        seq = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        text = json.dumps(seq, default=str)
    elif isinstance(value, Path):
        text = value.as_posix()
    else:
        text = str(value)
    text = redact_uri(text)  # a tracking URI or endpoint with credentials in it
    if len(text) > MAX_PARAM_VALUE:  # MLflow rejects longer values; keep the head, say so
        text = text[: MAX_PARAM_VALUE - 14] + "...[truncated]"
    return text


def _tag_value(value: Any) -> str:
    return redact_uri(str(value))[:MAX_TAG_VALUE]


def flatten_params(config: BaseModel | Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested configs as MLflow params: ``{"rl": {"lr": 1e-5}} -> {"rl.lr": "1e-05"}``.
    Lists become JSON; pydantic models are dumped in JSON mode (paths, enums as strings);
    URL userinfo and secret query values are redacted (:func:`redact_uri`)."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
    flat: dict[str, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, BaseModel):
            node = node.model_dump(mode="json")
        if isinstance(node, Mapping) and node:
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        else:
            flat[clean_key(path)] = _param_value(node)

    walk(data, prefix)
    return flat


class TrackedRun:
    """One MLflow run, with helpers for what the stages log."""

    def __init__(self, client: MlflowClient, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"TrackedRun({self.run_id!r})"

    @property
    def info(self) -> Any:
        return self.client.get_run(self.run_id).info

    @property
    def artifact_uri(self) -> str:
        return str(self.info.artifact_uri)

    def log_params(self, params: BaseModel | Mapping[str, Any], prefix: str = "") -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in flatten_params(params, prefix).items()]
        for start in range(0, len(items), _PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + _PARAMS_PER_BATCH])

    def log_param(self, key: str, value: Any) -> None:
        self.client.log_param(self.run_id, clean_key(key), _param_value(value))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Many metrics of one step in one call; NaN is kept (MLflow stores it), None skipped."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(clean_key(k), float(v), now, step or 0)
            for k, v in metrics.items()
            if v is not None
        ]
        for start in range(0, len(items), _METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[start : start + _METRICS_PER_BATCH])

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        self.log_metrics({key: value}, step=step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tags; their values with URL userinfo redacted and cut to MLflow's length."""
        from mlflow.entities import RunTag

        items = [RunTag(clean_key(k), _tag_value(v)) for k, v in tags.items()]
        for start in range(0, len(items), _PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=items[start : start + _PARAMS_PER_BATCH])

    def set_tag(self, key: str, value: Any) -> None:
        self.set_tags({key: value})

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """A file, or a folder's contents, under ``artifact_path`` in the run's artifacts."""
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path)
        elif path.is_file():
            self.client.log_artifact(self.run_id, str(path), artifact_path)
        else:
            raise FileNotFoundError(f"nothing to log at {path}")

    def log_dict(self, data: Mapping[str, Any] | list[Any], artifact_file: str) -> None:
        """A JSON (or YAML, by extension) document: reports, manifests, summaries."""
        self.client.log_dict(self.run_id, data, artifact_file)  # type: ignore[arg-type]

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """A matplotlib (or plotly) figure, e.g. ``plots/progress.png``."""
        self.client.log_figure(self.run_id, figure, artifact_file)

    def log_video(self, path: str | os.PathLike[str], artifact_path: str = "videos") -> None:
        self.log_artifact(path, artifact_path)

    def log_dataset_manifest(self, manifest: Mapping[str, Any], name: str) -> None:
        """A dataset's manifest (files, sizes, hashes, counts) as ``datasets/<name>.json``;
        its ``uri``, when given, also becomes the tag ``dataset.<name>``."""
        self.log_dict(dict(manifest), f"datasets/{name}.json")
        if "uri" in manifest:
            self.set_tag(f"dataset.{name}", manifest["uri"])

    def log_validation_report(self, report: BaseModel | Mapping[str, Any], name: str) -> None:
        """A validation report as ``reports/<name>.json``; a boolean ``passed``/``ok`` field
        also becomes the tag ``validation.<name>``."""
        data = report.model_dump(mode="json") if isinstance(report, BaseModel) else dict(report)
        self.log_dict(data, f"reports/{name}.json")
        for flag in ("passed", "ok", "valid"):
            if isinstance(data.get(flag), bool):
                self.set_tag(f"validation.{name}", "passed" if data[flag] else "failed")
                break

    def log_artifact_ref(self, name: str, uri: str) -> None:
        """Point at something in the artifact store (a checkpoint) without copying it."""
        self.set_tag(f"artifact.{name}", uri)

    def end(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


class Tracker:
    """An MLflow experiment (one per flow) and the runs in it."""

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = "odyssey",
        *,
        registry_uri: str | None = None,
        artifact_location: str | None = None,
    ) -> None:
        from mlflow import MlflowClient

        from odyssey_core.registry.settings import RegistrySettings

        tracking = RegistrySettings.from_env().tracking
        self.tracking_uri = tracking_uri or tracking.tracking_uri
        self.client = MlflowClient(
            tracking_uri=self.tracking_uri, registry_uri=registry_uri or tracking.registry_uri
        )
        self.experiment_name = experiment
        self.experiment_id = self._ensure_experiment(
            experiment, artifact_location or tracking.artifact_location
        )
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"Tracker({self.experiment_name!r}, id={self.experiment_id})"

    def _ensure_experiment(self, name: str, artifact_location: str | None) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name, artifact_location=artifact_location))
        except MlflowException as err:
            # Another process created it between our lookup and create: use theirs.
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise err from None
            return str(found.experiment_id)

    @property
    def _stack(self) -> list[TrackedRun]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack  # type: ignore[no-any-return]

    @property
    def active_run(self) -> TrackedRun | None:
        """The innermost run this thread opened with ``run``/``stage_run``."""
        return self._stack[-1] if self._stack else None

    def attach(self, run_id: str) -> TrackedRun:
        """A handle on an existing run (e.g. the flow's run, in a task's process)."""
        return TrackedRun(self.client, run_id)

    def start(
        self,
        name: str,
        *,
        parent_run_id: str | None = None,
        params: BaseModel | Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> TrackedRun:
        """Create a run (nested when ``parent_run_id`` is set); the caller ends it."""
        run_tags = {clean_key(k): _tag_value(v) for k, v in (tags or {}).items()}
        if parent_run_id:
            run_tags[PARENT_TAG] = parent_run_id
        created = self.client.create_run(self.experiment_id, run_name=name, tags=run_tags)
        run = TrackedRun(self.client, created.info.run_id)
        if params is not None:
            run.log_params(params)
        return run

    @contextmanager
    def run(
        self,
        name: str,
        *,
        parent_run_id: str | None = None,
        params: BaseModel | Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Iterator[TrackedRun]:
        """A run for the block: FINISHED on success, FAILED on an error, KILLED on Ctrl-C."""
        run = self.start(name, parent_run_id=parent_run_id, params=params, tags=tags)
        self._stack.append(run)
        status = "FINISHED"
        try:
            yield run
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except BaseException as err:
            status = "FAILED"
            # the type and first line, redacted and bounded: the traceback is in the flow's log
            run.set_tag("odyssey.error", summarise_error(err))
            raise
        finally:
            self._stack.remove(run)
            run.end(status)

    @contextmanager
    def stage_run(
        self,
        name: str,
        *,
        parent_run_id: str | None = None,
        params: BaseModel | Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Iterator[TrackedRun]:
        """A run for one stage, nested under ``parent_run_id`` or this thread's active run."""
        parent = parent_run_id or (self.active_run.run_id if self.active_run else None)
        stage_tags = {STAGE_TAG: name, **(tags or {})}
        with self.run(name, parent_run_id=parent, params=params, tags=stage_tags) as run:
            yield run

    def child_runs(self, parent_run_id: str) -> list[Any]:
        """The runs nested directly under a run, oldest first."""
        return list(
            self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'",
                order_by=["attributes.start_time ASC"],
            )
        )

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) pairs of a metric, by step."""
        history = self.client.get_metric_history(run_id, key)
        return sorted((m.step, m.value) for m in history)

"""No credential that rides in a URI reaches MLflow: params, run tags (the error tag included),
registered versions' tags and descriptions, on a real SQLite MLflow and on a real
``mlflow server`` reached through a tracking URI with ``user:pass@`` in it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_procs import mlflow_process

from odyssey_core.stages import RunConfig, StageContext, parent_run, register_and_gate, run_stage

pytest_plugins = ["tests.s3_fixtures"]  # the migrated MLflow template database

SECRET = "hunter2-s3cr3t"
CREDENTIALED = f"https://odyssey:{SECRET}@vlm.example/v1?api_key={SECRET}"
REDACTED = "https://***@vlm.example/v1?api_key=***"


def _everything_recorded(tracking_uri: str, experiment: str) -> list[str]:
    """Every param and tag value of every run of ``experiment`` and every tag and description
    of every registered model version."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    texts: list[str] = []
    for run in client.search_runs([found.experiment_id]):
        texts += [*run.data.params.values(), *run.data.tags.values()]
    for model in client.search_registered_models():
        texts += [str(v) for v in (model.tags or {}).values()]
        for version in client.search_model_versions(f"name = '{model.name}'"):
            texts += [*(version.tags or {}).values(), version.description or ""]
    return texts


def _pipeline(cfg: RunConfig) -> None:
    """A flow run with URIs carrying credentials in a stage's params, a failing stage's error
    and a registered version's tags and links."""

    def failing(ctx: StageContext) -> dict[str, Any]:
        raise ConnectionError(f"cannot reach {CREDENTIALED}\nTraceback: frame 1\nframe 2")

    def promote(ctx: StageContext) -> dict[str, Any]:
        return register_and_gate(
            ctx,
            game="odland",
            checkpoint_uri="s3://elsewhere/checkpoint",  # not in this store: registered bare
            candidate_scores=[10.0, 11.0, 10.0, 9.0],
            base_model=CREDENTIALED,
            evaluate_reference=lambda model, label, out: ([0.0, 1.0, 0.5, 0.2], {}),
            tags={"odyssey.teacher": CREDENTIALED},
            links={"link.teacher": CREDENTIALED},
        ).outputs()

    with parent_run(cfg, "redaction-flow") as parent:
        run_stage(
            cfg,
            "annotate",
            lambda ctx: {"teacher": CREDENTIALED},
            params={"teacher": {"base_url": CREDENTIALED}, "endpoints": [CREDENTIALED]},
            parent_run_id=parent,
        )
        with pytest.raises(ConnectionError):
            run_stage(cfg, "rl", failing, parent_run_id=parent)
        run_stage(cfg, "promote", promote, parent_run_id=parent)


def test_sqlite_mlflow_records_no_userinfo(tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow import MlflowClient

    cfg = RunConfig(
        name="redaction",
        run_dir=tmp_path / "run",
        tracking_uri=mlflow_uri,
        experiment="odyssey/redaction",
    )
    _pipeline(cfg)
    texts = _everything_recorded(mlflow_uri, cfg.experiment)
    assert texts and not [t for t in texts if SECRET in t]
    client = MlflowClient(tracking_uri=mlflow_uri)
    runs = {
        r.info.run_name: r
        for r in client.search_runs([client.get_experiment_by_name(cfg.experiment).experiment_id])
    }
    assert runs["annotate"].data.params["teacher.base_url"] == REDACTED
    assert runs["rl"].data.tags["odyssey.error"] == (
        f"ConnectionError: cannot reach {REDACTED} (+2 more lines)"
    )
    version = client.get_model_version("odysseus-odland", "1")
    assert version.tags["odyssey.teacher"] == REDACTED and REDACTED in version.description


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def mlflow_server(tmp_path: Path, mlflow_uri: str) -> Iterator[str]:
    """``mlflow server`` on loopback (SQLite backend, local artifacts), stopped by its PID."""
    port = _free_port()
    log = tmp_path / "mlflow-server.log"
    proc = mlflow_process(
        [
            *("server", "--backend-store-uri", mlflow_uri),
            *("--artifacts-destination", (tmp_path / "served-artifacts").as_uri()),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ],
        log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.mark.slow  # an mlflow server process: about 15 s
def test_tracking_uri_with_credentials_is_not_logged(tmp_path: Path, mlflow_server: str) -> None:
    from mlflow import MlflowClient

    host = mlflow_server.removeprefix("http://")
    tracking = f"http://odyssey:{SECRET}@{host}"  # the server takes (and ignores) basic auth
    cfg = RunConfig(
        name="redaction",
        run_dir=tmp_path / "run",
        tracking_uri=tracking,
        artifact_uri=(tmp_path / "store").as_uri(),
        experiment="odyssey/redaction",
    )
    _pipeline(cfg)
    texts = _everything_recorded(mlflow_server, cfg.experiment)
    assert texts and not [t for t in texts if SECRET in t]
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name(cfg.experiment).experiment_id
    flow = client.search_runs([experiment], "attributes.run_name = 'redaction-flow:redaction'")
    assert flow[0].data.params["tracking_uri"] == f"http://***@{host}"

"""The pipeline reads the usual environment when a preset does not set the stores: a stage
pair (publish a checkpoint, register and gate it) against a real ``mlflow server`` process
(SQLite backend, artifacts proxied to S3) and the moto S3 server, both on loopback, wired by
environment variables only (``MLFLOW_TRACKING_URI``, ``AWS_ENDPOINT_URL``, the AWS credential
variables, ``ODYSSEY_ARTIFACT_URI``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import model_fixtures
import pytest
import torch
from helpers_procs import mlflow_process

from odyssey_core.stages import RunConfig, StageContext, parent_run, register_and_gate, run_stage

pytest_plugins = ["tests.s3_fixtures"]  # moto server, AWS env, MLflow template database

torch.set_num_threads(1)
tiny_model_dir = model_fixtures.tiny_model_dir

STORE_BUCKET = "odyssey"
MLFLOW_BUCKET = "odyssey-mlflow"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The server's process group, by the PID this test started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def mlflow_server(
    tmp_path: Path, mlflow_uri: str, moto_endpoint: str, aws_env: None
) -> Iterator[str]:
    """``mlflow server`` on loopback: SQLite backend, artifacts proxied to a moto bucket."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    for bucket in (STORE_BUCKET, MLFLOW_BUCKET):
        s3.create_bucket(Bucket=bucket)
    port = _free_port()
    proc = mlflow_process(
        [
            *("server", "--backend-store-uri", mlflow_uri),
            *("--artifacts-destination", f"s3://{MLFLOW_BUCKET}"),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ],
        tmp_path / "mlflow-server.log",
        MLFLOW_S3_ENDPOINT_URL=moto_endpoint,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            text = lambda: (tmp_path / "mlflow-server.log").read_text()[-3000:]  # noqa: E731
            assert proc.poll() is None, text()
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, text()
            time.sleep(0.5)
        yield url
    finally:
        _stop(proc)


@pytest.mark.slow  # a server process, moto and the tiny model: about a minute
def test_stage_pair_uses_the_environment(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mlflow_server: str,
    moto_endpoint: str,
    tiny_model_dir: Path,
) -> None:
    import boto3
    import mlflow
    import pandas as pd
    from mlflow import MlflowClient

    from odyssey_core.registry.pyfunc import encode_frame

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("ODYSSEY_ARTIFACT_URI", f"s3://{STORE_BUCKET}/artifacts")
    monkeypatch.delenv("ODYSSEY_MLFLOW_ARTIFACT_LOCATION", raising=False)
    cfg = RunConfig(name="env", run_dir=tmp_path / "run")  # no store or tracking URI set
    assert cfg.mlflow_uri == mlflow_server and cfg.store_uri.startswith("s3://")

    with parent_run(cfg, "env-flow") as parent:

        def publish(ctx: StageContext) -> dict[str, Any]:
            return {"checkpoint_uri": ctx.publish_dir(tiny_model_dir, "checkpoint", ref="ckpt")}

        checkpoint = run_stage(cfg, "rl", publish, parent_run_id=parent)["checkpoint_uri"]
        assert checkpoint.startswith(f"s3://{STORE_BUCKET}/artifacts/runs/env/rl/")

        def body(ctx: StageContext) -> dict[str, Any]:
            return register_and_gate(
                ctx,
                game="odland",
                checkpoint_uri=checkpoint,
                candidate_scores=[10.0, 11.0, 10.0, 9.0],
                base_model="file:///base",
                evaluate_reference=lambda model, label, out: ([0.0, 1.0, 0.5, 0.2], {}),
            ).outputs()

        out = run_stage(cfg, "promote", body, parent_run_id=parent)
    assert out["promoted"] and out["champion"] == 1
    assert not (tmp_path / "run" / "mlflow.db").exists()  # nothing went to the local default

    client = MlflowClient(tracking_uri=mlflow_server)
    mv = client.get_model_version_by_alias("odysseus-odland", "champion")
    assert mv.tags["checkpoint_uri"] == checkpoint and mv.source.startswith("mlflow-artifacts:")
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    stored = [o["Key"] for o in s3.list_objects_v2(Bucket=STORE_BUCKET)["Contents"]]
    assert any(k.endswith("config.json") for k in stored)
    logged = [o["Key"] for o in s3.list_objects_v2(Bucket=MLFLOW_BUCKET)["Contents"]]
    assert any(k.endswith("model/MLmodel") for k in logged), logged[:10]

    mlflow.set_tracking_uri(mlflow_server)
    try:
        model = mlflow.pyfunc.load_model("models:/odysseus-odland@champion")
    finally:
        mlflow.set_tracking_uri(None)
    frame = encode_frame(__import__("numpy").zeros((144, 160, 3), "uint8"))
    answer = model.predict(
        pd.DataFrame([{"image": frame, "text": "Level 1-1."}]), params={"max_new_tokens": 8}
    )
    assert json.loads(answer["action"][0])
    shutil.rmtree(tmp_path / "run", ignore_errors=True)

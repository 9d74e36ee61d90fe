"""The `train-odysseus/odland-tiny` deployment end to end, the way an operator runs it: a real
`prefect server` subprocess (own PREFECT_HOME and SQLite database), the `odyssey-cpu` process
work pool, `prefect deploy` from prefect.yaml, `prefect deployment run` with a private run_dir,
and a `prefect worker start --run-once` that executes the flow run. Then the outcome is checked
where it lands: the flow run's state on the server, the MLflow registry in <run_dir>/mlflow.db
and the file:// artifact store under <run_dir>/artifacts."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).with_name("prefect"))
DEPLOYMENT = "train-odysseus/odland-tiny"
POOL = "odyssey-cpu"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(home: Path, api_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api_url,
        PREFECT_API_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{home / 'prefect.db'}",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
        PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="false",
        MLFLOW_DISABLE_TELEMETRY="true",
        GX_ANALYTICS_ENABLED="false",
        ODYSSEY_HOME=str(REPO),  # the deployments' pull step: set_working_directory
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    return env


def _stop(proc: subprocess.Popen | None) -> None:
    """End a process we started, and its children (its own session), by its PID."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_healthy(api_url: str, server: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"prefect server exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
                if resp.status == 200 and json.loads(resp.read()) is True:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"prefect server not healthy after {timeout}s:\n{log.read_text()[-3000:]}")


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [PREFECT, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{out[-4000:]}"
    return out


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _post_json(url: str, body: dict) -> list | dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def prefect_server(tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """A real `prefect server start` on loopback with its own PREFECT_HOME and SQLite database;
    yields the environment that points the CLI and clients at it, and its API URL. Stopped by
    PID (its own session) on the way out."""
    home = tmp_path / "prefect-home"
    home.mkdir(exist_ok=True)
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = _env(home, api_url)
    log = tmp_path / "server.log"
    server = None
    try:
        with log.open("w") as out:
            server = subprocess.Popen(
                [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait_healthy(api_url, server, log, timeout=120)
        yield env, api_url
    finally:
        _stop(server)


def documented_commands() -> list[list[str]]:
    """The `prefect ...` lines of README's "Local deployments" block, in order (without the
    server, which the test starts, the long-running worker and the final `deployment run`)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("Local deployments:", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip().rstrip("&").strip()
        if line.startswith(".venv/bin/prefect "):
            args = line.split()[1:]
            if args[:1] in (["server"], ["worker"]) or args[:2] == ["deployment", "run"]:
                continue
            commands.append(args)
    return commands


@pytest.mark.slow
def test_documented_sequence_deploys_every_deployment(tmp_path: Path) -> None:
    """README's "Local deployments", as written, against a real server: every deployment in
    prefect.yaml exists afterwards, on the pool it names (GPU ones included)."""
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    commands = documented_commands()
    assert any(c[-2:] == ["deploy", "--all"] for c in commands), commands
    with prefect_server(tmp_path) as (env, api_url):
        for args in commands:
            _cli(env, *args, timeout=300)
        deployed = _post_json(f"{api_url}/deployments/filter", {"limit": 200})
        flows = {f["id"]: f["name"] for f in _post_json(f"{api_url}/flows/filter", {})}
        # a second run of the sequence is harmless (pools --overwrite, deploy updates)
        for args in commands:
            _cli(env, *args, timeout=300)
        again = _post_json(f"{api_url}/deployments/filter", {"limit": 200})
    names = {f"{flows[d['flow_id']]}/{d['name']}": d for d in deployed}
    entry_flows = {
        "flows/play.py:play_episode_flow": "play-episode",
        "flows/odysseus.py:train_odysseus_flow": "train-odysseus",
        "flows/nightly.py:nightly_eval_flow": "nightly-eval",
        "flows/gtr.py:train_gtr_flow": "train-gtr",
        "flows/espo.py:train_espo_flow": "train-espo",
    }
    expected = {f"{entry_flows[d['entrypoint']]}/{d['name']}": d for d in spec}
    assert set(names) == set(expected), sorted(set(expected) ^ set(names))
    for full, d in expected.items():
        assert names[full]["work_pool_name"] == d["work_pool"]["name"], full
        assert names[full]["parameters"] == d["parameters"], full
        assert bool(names[full]["schedules"]) == bool(d.get("schedules")), full
        if d["work_pool"]["name"] == "odyssey-gpu":  # the ranks' lines reach the flow run log
            env = names[full]["job_variables"]["env"]
            assert env["PREFECT_LOGGING_EXTRA_LOGGERS"] == "odyssey_core", full
    assert len(again) == len(deployed)
    assert {
        "train-odysseus/mario",
        "nightly-eval/mario",
        "nightly-eval/gtr-points24",
        "train-espo/tiny",
        "train-espo/travel",
        "nightly-eval/espo-tiny",
    } <= set(names)


@pytest.mark.slow
def test_odland_tiny_deployment_runs_on_a_process_worker(tmp_path: Path) -> None:
    from odyssey_core.recipes.odysseus.pipeline import load_pipeline_config
    from odyssey_core.registry.artifacts import open_store
    from odyssey_core.registry.models import ModelRegistry

    run_dir = tmp_path / "run"
    worker_log = tmp_path / "worker.log"
    worker = None
    with prefect_server(tmp_path) as (env, api_url):
        try:
            _cli(env, "work-pool", "create", POOL, "--type", "process")
            _cli(env, "--no-prompt", "deploy", "--name", "odland-tiny")
            # configs/odysseus/pipeline/tiny.yaml is the minimal budget (as in
            # tests/recipes/odysseus/test_pipeline.py); the only override is the private run_dir
            params = {"preset": "tiny", "overrides": {"run_dir": str(run_dir)}}
            out = _cli(env, "deployment", "run", DEPLOYMENT, "--params", json.dumps(params))
            match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
            assert match, f"no flow run id in:\n{out}"
            flow_run_id = match.group(1)

            with worker_log.open("w") as out_file:
                worker = subprocess.Popen(
                    [PREFECT, "worker", "start", "--pool", POOL, "--run-once"],
                    cwd=tmp_path,
                    env=env,
                    stdout=out_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                worker.wait(timeout=200)
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker did not finish in time:\n{worker_log.read_text()[-4000:]}")

            flow_run = _get_json(f"{api_url}/flow_runs/{flow_run_id}")
            assert flow_run["state"]["type"] == "COMPLETED", (
                f"flow run {flow_run['state']}:\n{worker_log.read_text()[-4000:]}"
            )
            assert flow_run["parameters"]["overrides"]["run_dir"] == str(run_dir)
        finally:
            _stop(worker)

    # the registry: version 1 of odysseus-odland, aliased by the gate, with its decision as tags
    cfg = load_pipeline_config("tiny", {"run_dir": str(run_dir)})
    assert (run_dir / "mlflow.db").is_file()
    assert cfg.mlflow_uri == f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
    registry = ModelRegistry(cfg.mlflow_uri)
    name = registry.model_name("odland")
    assert name == "odysseus-odland"
    versions = registry.client.search_model_versions(f"name='{name}'")
    assert [str(v.version) for v in versions] == ["1"]
    mv = registry.client.get_model_version(name, "1")
    decision = mv.tags["promotion.decision"]
    assert decision in {"promoted", "rejected"}
    for key in ("reason", "reference", "candidate_mean", "reference_mean", "p", "margin"):
        assert f"promotion.{key}" in mv.tags, key
    assert mv.tags["promotion.reference"] == "base"
    assert "metric.eval.mean_progress" in mv.tags
    if decision == "promoted":
        assert registry.champion("odland") == 1 and "champion" in mv.aliases
    else:
        assert registry.candidate("odland") == 1 and "candidate" in mv.aliases
        assert registry.champion("odland") is None

    # the artifacts: complete entries in the file:// store under <run_dir>/artifacts
    store_root = (run_dir / "artifacts").resolve()
    assert cfg.store_uri == store_root.as_uri()
    # the version is an MLflow Model; the checkpoint it was made from is in the store
    assert mv.source.endswith("/model") and "MLmodel" in mlflow_files(cfg, mv)
    checkpoint = mv.tags["checkpoint_uri"]
    assert checkpoint.startswith(store_root.as_uri() + "/")
    store = open_store(cfg.store_uri)
    prefix = f"runs/{cfg.run_key}"
    for key in ("curate/dataset", "sft/model", "sft/base-model"):
        assert store.read_manifest(f"{prefix}/{key}").files, key
    # the registered checkpoint lives under a key of its own run's inputs: immutable
    checkpoint_key = store.key_for(checkpoint)
    assert checkpoint_key.startswith(f"{prefix}/rl/checkpoint-")
    assert store.read_manifest(checkpoint_key).files
    assert store.exists(f"{prefix}/evaluate/scores.json")
    assert (store_root / checkpoint_key).is_dir()


def mlflow_files(cfg, mv) -> set[str]:
    """The file names at the top of a registered version's MLflow Model."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=cfg.mlflow_uri)
    return {a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(mv.run_id, "model")}

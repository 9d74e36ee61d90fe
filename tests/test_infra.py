"""The shipped infrastructure files hang together (no Docker engine runs in CI)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_compose_services_and_the_worker_image() -> None:
    compose = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"prefect-server", "worker", "mlflow", "minio"} <= set(services)
    worker = services["worker"]
    assert (ROOT / "infra" / worker["build"]["context"] / worker["build"]["dockerfile"]).is_file()
    pool = worker["entrypoint"][worker["entrypoint"].index("--pool") + 1]
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    pools = {d["work_pool"]["name"] for d in deployments}
    assert pool in pools, "the compose worker serves the CPU deployments"
    assert pools <= {pool, "odyssey-gpu"}, "every deployment names a pool someone runs"


def test_dockerfile_copies_what_the_flows_import() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in ("odyssey_core", "configs", "flows", "tasks", "prefect.yaml"):
        assert f"COPY {path}" in dockerfile, path
    assert "torch==2.13.0" in dockerfile


def test_gtr_deployments_run_the_train_gtr_flow_on_their_pools() -> None:
    from odyssey_core.recipes.gtr.pipeline import load_gtr_pipeline_config

    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    gtr = {d["name"]: d for d in deployments if d["entrypoint"] == "flows/gtr.py:train_gtr_flow"}
    assert set(gtr) == {"points24", "numberline-tiny"}
    assert gtr["points24"]["work_pool"]["name"] == "odyssey-gpu"
    assert gtr["numberline-tiny"]["work_pool"]["name"] == "odyssey-cpu"
    games = {
        name: load_gtr_pipeline_config(d["parameters"]["preset"]).game for name, d in gtr.items()
    }
    assert games == {"points24": "gtr-points24", "numberline-tiny": "gtr-numberline"}

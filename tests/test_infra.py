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

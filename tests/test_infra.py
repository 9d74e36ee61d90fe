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


def test_the_documented_setup_creates_every_pool_a_deployment_names() -> None:
    """README's "Local deployments" and the compose stack both create each pool, so
    `prefect --no-prompt deploy --all` does not stop at the first GPU deployment."""
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    pools = {d["work_pool"]["name"] for d in deployments}
    readme = (ROOT / "README.md").read_text().split("Local deployments:", 1)[1]
    block = readme.split("```bash", 1)[1].split("```", 1)[0]
    created = set()
    for line in block.splitlines():
        words = line.split("#", 1)[0].split()
        if words[1:3] == ["work-pool", "create"]:
            created.add(words[3])
    assert pools <= created, pools - created
    assert "--no-prompt deploy --all" in block and "-m flows.automations" in block

    compose = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())["services"]
    in_compose = set()
    for service in compose.values():
        text = " ".join(
            str(x) for key in ("entrypoint", "command") for x in _as_list(service.get(key))
        )
        words = text.split()
        if "--pool" in words:  # a process worker creates the pool it serves
            in_compose.add(words[words.index("--pool") + 1])
        if "work-pool" in words and "create" in words:
            in_compose.add(words[words.index("create") + 1])
    assert pools <= in_compose, pools - in_compose


def _as_list(value: object) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]

"""The shipped infrastructure files hang together (no Docker engine runs in CI)."""

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import pytest
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


# ----------------------------------------------------------------------------- compose secrets


class UnsetVariable(Exception):
    """``${VAR:?message}`` with VAR unset or empty: compose refuses to start."""


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\})"
)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable interpolation: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
    ``${VAR-default}``, ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+other}``."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["bare"] or match["name"]
        op, arg = match["op"], match["arg"] or ""
        value = env.get(name)
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if op in ("-", ":-"):
            return arg if unset else str(value)
        if op in ("?", ":?"):
            if unset:
                raise UnsetVariable(f"{name}: {arg}")
            return str(value)
        if op in ("+", ":+"):
            return "" if unset else arg
        return value or ""

    return _VARIABLE.sub(replace, text)


def test_interpolate_follows_compose() -> None:
    env = {"A": "1", "E": ""}
    assert interpolate("$A ${A} ${B:-d} ${E:-d} ${E-d} ${A:+x} $$A", env) == "1 1 d d  x $A"
    with pytest.raises(UnsetVariable, match="B: say so"):
        interpolate("${B:?say so}", env)
    with pytest.raises(UnsetVariable):
        interpolate("${E:?empty counts}", env)


def _compose() -> dict:
    return yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())["services"]


def _environment(service: Mapping) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", ...]
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


_CREDENTIAL = re.compile(r"PASSWORD|SECRET|ACCESS_KEY|AUTH|TOKEN|_USER$")


def test_compose_takes_every_credential_from_the_environment_without_a_default() -> None:
    """With nothing set, compose stops and names the variable; set, the value is the variable
    itself: no credential ships in the file."""
    found = {
        (name, key): value
        for name, service in _compose().items()
        for key, value in _environment(service).items()
        if _CREDENTIAL.search(key)
    }
    keys = {key for _, key in found}
    assert {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "AWS_ACCESS_KEY_ID"} <= keys
    assert {"AWS_SECRET_ACCESS_KEY", "PREFECT_SERVER_API_AUTH_STRING"} <= keys
    for (service, key), value in found.items():
        variables = [m["name"] or m["bare"] for m in _VARIABLE.finditer(value) if not m["escaped"]]
        assert len(variables) == 1, f"{service}.{key}: {value!r} is not one variable"
        with pytest.raises(UnsetVariable, match=variables[0]):
            interpolate(value, {})
        secret = "a-long-enough-value"
        assert interpolate(value, {variables[0]: secret}) == secret, f"{service}.{key}"


def test_compose_prefect_api_needs_the_auth_string_everywhere() -> None:
    """The Prefect API runs deployments on the worker: the server asks for basic auth and
    every client of it sends the same string."""
    services = _compose()
    server = _environment(services["prefect-server"])["PREFECT_SERVER_API_AUTH_STRING"]
    clients = {
        n: _environment(s) for n, s in services.items() if "PREFECT_API_URL" in _environment(s)
    }
    assert {"worker", "work-pools"} <= set(clients)
    for name, env in clients.items():
        assert env.get("PREFECT_API_AUTH_STRING") == server, name


def _published(env: Mapping[str, str]) -> dict[str, list[str]]:
    """service -> the host address of each port it publishes (None: every interface)."""
    out: dict[str, list[str]] = {}
    for name, service in _compose().items():
        for port in service.get("ports") or []:
            if isinstance(port, Mapping):  # the long syntax
                address = interpolate(str(port.get("host_ip", "")), env) or None
            else:
                parts = interpolate(str(port), env).split(":")
                address = parts[0] if len(parts) == 3 else None
            out.setdefault(name, []).append(address)
    return out


def test_compose_publishes_every_port_on_loopback_unless_widened() -> None:
    default = _published({})
    assert set(default) == {"prefect-server", "mlflow", "minio"}
    assert all(a == "127.0.0.1" for addresses in default.values() for a in addresses), default
    widened = _published({"ODYSSEY_BIND_ADDRESS": "0.0.0.0"})
    assert all(a == "0.0.0.0" for addresses in widened.values() for a in addresses), widened


# ----------------------------------------------------------------------------- GPU placement


def _gpu_pool_job(**values: object) -> dict:
    """The GPU work pool's Job manifest as Prefect's worker renders it (defaults + values)."""
    from prefect.utilities.templating import apply_values

    template = json.loads((ROOT / "infra" / "k8s-work-pool.json").read_text())
    properties = template["variables"]["properties"]
    defaults = {k: v["default"] for k, v in properties.items() if "default" in v}
    rendered = apply_values(template["job_configuration"], {**defaults, **values})
    return rendered["job_manifest"]


def test_gpu_pool_pods_take_a_whole_8_gpu_node() -> None:
    job = _gpu_pool_job(name="rl", image="odyssey:cuda")
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 8
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "960Gi"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Gi"}
    assert _gibibytes("128Gi") < _gibibytes(resources["limits"]["memory"])  # shm is charged
    # on-disk rollout frames go to the node-disk scratch volume
    scratch = volumes[mounts["/scratch"]]["emptyDir"]
    assert "medium" not in scratch and scratch["sizeLimit"] == "400Gi"
    env = {e["name"]: e["value"] for e in _env_list(job)}
    assert env["ODYSSEY_FRAMES_DIR"].startswith("/scratch/")
    assert int(env["ODYSSEY_FRAMES_ON_DISK"]) > 0
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["7"]} in expressions
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in expressions
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    # a deployment can still ask for a smaller slice
    small = _gpu_pool_job(name="eval", gpus=1, memory="64Gi")["spec"]["template"]["spec"]
    assert small["containers"][0]["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/gpu": 1}


def _env_list(job: dict) -> list[dict]:
    # the worker fills the container env from the flow run; the template's default is a map
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return [{"name": k, "value": v} for k, v in env.items()] if isinstance(env, dict) else env


def _gibibytes(quantity: str) -> float:
    units = {"Gi": 1.0, "Ti": 1024.0, "Mi": 1 / 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def _multinode() -> dict[str, dict]:
    docs = yaml.safe_load_all((ROOT / "infra" / "k8s" / "rl-multinode.yaml").read_text())
    return {doc["kind"]: doc for doc in docs}


def test_multinode_job_runs_torchrun_on_every_node_with_rendezvous_at_pod_0() -> None:
    from odyssey_core.launch import LaunchSettings, launcher_command, train_args

    docs = _multinode()
    job, service = docs["Job"], docs["Service"]
    spec = job["spec"]
    nodes = spec["completions"]
    assert (nodes, spec["parallelism"], spec["completionMode"]) == (2, 2, "Indexed")
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 8
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm["medium"] == "Memory"
    # pod k answers at <job>-k.<subdomain>; the headless Service selects the Job's pods
    assert service["spec"]["clusterIP"] == "None"
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"

    assert container["command"] == ["bash", "-c"]
    words = shlex.split(container["args"][0])
    assert words[0] == "exec"
    endpoint = f"{job['metadata']['name']}-0.{service['metadata']['name']}:29500"
    preset = "/etc/odyssey/mario-rl.yaml"
    args = train_args("odysseus", Path(preset), Path("/runs/mario-rl"))
    for rank in range(nodes):  # each pod's completion index is its node rank
        launch = LaunchSettings(
            nproc_per_node=8, nnodes=nodes, node_rank=rank, rdzv_endpoint=endpoint
        )
        command = [w.replace("$JOB_COMPLETION_INDEX", str(rank)) for w in words[1:]]
        assert command == launcher_command(launch, args, python="python")
    port = service["spec"]["ports"][0]["port"]
    assert port == 29500 == container["ports"][0]["containerPort"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert Path(preset).parent == Path(mounts["preset"])


def test_multinode_preset_is_a_valid_paper_preset(tmp_path: Path) -> None:
    from odyssey_core.recipes.odysseus.settings import load_train_settings

    text = _multinode()["ConfigMap"]["data"]["mario-rl.yaml"]
    preset = yaml.safe_load(text)
    assert preset["inherit"] == "/opt/odyssey/configs/odysseus/paper.yaml"  # the image's
    preset["inherit"] = str(ROOT / "configs" / "odysseus" / "paper.yaml")
    (tmp_path / "mario-rl.yaml").write_text(yaml.safe_dump(preset))
    settings = load_train_settings(tmp_path / "mario-rl.yaml")
    assert settings.model.gradient_checkpointing and settings.model.device == "cuda"
    assert settings.rollout.num_trajectories == 1024 and settings.rollout.max_turns == 400

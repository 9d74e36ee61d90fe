"""The Prefect layer: deployments point at real flows, and a flow runs against a real
(temporary, SQLite-backed) Prefect server."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_every_deployment_entrypoint_is_a_flow() -> None:
    from prefect import Flow

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert spec["deployments"], "prefect.yaml declares deployments"
    for deployment in spec["deployments"]:
        path, _, name = deployment["entrypoint"].partition(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        flow = getattr(module, name)
        assert isinstance(flow, Flow), deployment["entrypoint"]
        assert set(deployment.get("parameters", {})) <= set(flow.parameters.properties)


def test_play_episode_flow_writes_a_video_and_an_artifact(prefect_server, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    from flows.play import play_episode_flow

    result = play_episode_flow(
        env_name="odland-1-1", agent="random", max_turns=5, video_dir=str(tmp_path)
    )
    assert Path(result["video"]).is_file()
    assert 1 <= result["turns"] <= 5

    async def artifacts():
        async with get_client() as client:
            return await client.read_artifacts()

    keys = {a.key for a in asyncio.run(artifacts())}
    assert "episode-odland-1-1-random" in keys


def test_the_stage_cache_key_follows_publications_not_uris(tmp_path: Path) -> None:
    """A stage's URI stays the same when its stage reruns; the cache key must not: it follows
    the publication the URI holds, ignores the MLflow parent run, and the cache expires."""
    from types import SimpleNamespace

    from odyssey_core.recipes.odysseus.pipeline import load_pipeline_config
    from odyssey_core.stages import run_store
    from tasks.common import STAGE_TASK, stage_cache_key

    cfg = load_pipeline_config("tiny", {"run_dir": str(tmp_path / "run")})
    store = run_store(cfg, "rl")
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_text("first")
    uri = store.put_dir(weights, "checkpoint")
    context = SimpleNamespace(task=SimpleNamespace(name="evaluate"))

    def key(parent: str) -> str:
        params = {"cfg": cfg, "checkpoint_uri": uri, "parent_run_id": parent}
        return stage_cache_key(context, params)  # type: ignore[arg-type]

    first = key("run-a")
    assert key("run-b") == first  # another flow run, same inputs: the cache answers
    (weights / "model.safetensors").write_text("retrained")
    assert store.put_dir(weights, "checkpoint") == uri  # same URI, new publication
    assert key("run-a") != first  # so the cache does not answer for the old weights
    assert STAGE_TASK["cache_expiration"].total_seconds() > 0


def test_the_stage_cache_key_changes_when_the_run_folder_is_removed(tmp_path: Path) -> None:
    """Prefect's result cache lives outside the run folder; once the folder is removed, its
    answers name outputs that are gone, so a recreated folder must get new keys (and a second
    process on the same folder the same ones)."""
    import shutil
    import subprocess
    import sys
    from types import SimpleNamespace

    from odyssey_core.recipes.odysseus.pipeline import load_pipeline_config
    from odyssey_core.stages import RUN_FOLDER_ID_FILE
    from tasks.common import stage_cache_key

    run_dir = tmp_path / "run"
    cfg = load_pipeline_config("tiny", {"run_dir": str(run_dir)})
    context = SimpleNamespace(task=SimpleNamespace(name="curate"))
    first = stage_cache_key(context, {"cfg": cfg})  # type: ignore[arg-type]
    assert stage_cache_key(context, {"cfg": cfg}) == first  # type: ignore[arg-type]
    assert (run_dir / RUN_FOLDER_ID_FILE).is_file()
    other_process = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from odyssey_core.stages import run_folder_id;"
            "from odyssey_core.recipes.odysseus.pipeline import load_pipeline_config;"
            "print(run_folder_id(load_pipeline_config('tiny', {'run_dir': sys.argv[1]})))",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert other_process.stdout.strip() == (run_dir / RUN_FOLDER_ID_FILE).read_text().strip()
    shutil.rmtree(run_dir)
    assert stage_cache_key(context, {"cfg": cfg}) != first  # type: ignore[arg-type]

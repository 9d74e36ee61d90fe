"""MLflow tracking on a real SQLite backend with a local artifact root."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from odyssey_core.config import OdysseyConfig
from odyssey_core.registry.tracking import STAGE_TAG, Tracker, flatten_params

pytest_plugins = ["tests.s3_fixtures"]  # the moto server, proxy and MLflow fixtures
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader:DeprecationWarning")


def _artifact_files(run_artifact_uri: str) -> set[str]:
    root = Path(urlparse(run_artifact_uri).path)
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_flatten_params_from_pydantic_and_dicts() -> None:
    flat = flatten_params(OdysseyConfig())
    assert flat["seed"] == "0"
    assert flat["env.game"] == "odland"
    assert flat["env.max_turns"] == "400"
    assert flat["env.rom_path"] == "None"
    nested = flatten_params(
        {"rl": {"lr": 1e-5, "levels": ["1-1", "1-2"], "empty": {}}, "bad key!": 1}, prefix="cfg"
    )
    assert nested == {
        "cfg.rl.lr": "1e-05",
        "cfg.rl.levels": '["1-1", "1-2"]',
        "cfg.rl.empty": "{}",
        "cfg.bad key_": "1",
    }
    long = flatten_params({"x": "a" * 10_000})["x"]
    assert len(long) == 6000 and long.endswith("[truncated]")


def test_flow_run_with_nested_stage_runs(
    mlflow_uri: str, mlflow_artifact_root: str, tmp_path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tracker = Tracker(mlflow_uri, "odyssey/train_odysseus", artifact_location=mlflow_artifact_root)
    assert Tracker(mlflow_uri, "odyssey/train_odysseus").experiment_id == tracker.experiment_id

    video = tmp_path / "episode.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42 fake video")
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "sub" / "critic.pt").write_bytes(b"weights")

    with tracker.run("odland-nightly", params=OdysseyConfig(), tags={"game": "odland"}) as flow:
        assert tracker.active_run is flow
        with tracker.stage_run("sft", params={"sft": {"lr": 2e-5, "epochs": 1}}) as sft:
            for step in range(5):
                sft.log_metrics({"loss": 1.0 / (step + 1), "lr": 2e-5}, step=step)
            sft.log_artifact_ref("checkpoint", "s3://odyssey/runs/r1/sft/checkpoint")
            sft.log_dataset_manifest(
                {"uri": "s3://odyssey/runs/r1/curate/data", "files": 3, "rows": 120}, "walkthroughs"
            )
            sft.log_validation_report({"passed": True, "errors": []}, "dataset")
        with tracker.stage_run("evaluate") as ev:
            fig, ax = plt.subplots()
            ax.plot([0, 1, 2], [0.0, 0.5, 0.7])
            ev.log_figure(fig, "plots/progress.png")
            plt.close(fig)
            ev.log_video(video)
            ev.log_artifact(ckpt, "checkpoint")
            ev.log_dict({"levels": {"1-1": 0.8}}, "reports/eval.json")
            ev.set_tags({"suite": "tiny", "seeds": 3})
        assert tracker.active_run is flow

    client = tracker.client
    parent = client.get_run(flow.run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.params["env.game"] == "odland" and parent.data.tags["game"] == "odland"
    children = tracker.child_runs(flow.run_id)
    assert [c.info.run_name for c in children] == ["sft", "evaluate"]
    assert all(c.info.status == "FINISHED" for c in children)
    assert [c.data.tags[STAGE_TAG] for c in children] == ["sft", "evaluate"]

    sft_run = client.get_run(sft.run_id)
    assert sft_run.data.params == {"sft.lr": "2e-05", "sft.epochs": "1"}
    assert tracker.metric_history(sft.run_id, "loss") == [
        (s, pytest.approx(1.0 / (s + 1))) for s in range(5)
    ]
    assert sft_run.data.tags["artifact.checkpoint"] == "s3://odyssey/runs/r1/sft/checkpoint"
    assert sft_run.data.tags["dataset.walkthroughs"] == "s3://odyssey/runs/r1/curate/data"
    assert sft_run.data.tags["validation.dataset"] == "passed"
    assert _artifact_files(sft.artifact_uri) == {
        "datasets/walkthroughs.json",
        "reports/dataset.json",
    }

    ev_run = client.get_run(ev.run_id)
    assert ev_run.data.tags["suite"] == "tiny" and ev_run.data.tags["seeds"] == "3"
    assert ev.artifact_uri.startswith(mlflow_artifact_root)
    files = _artifact_files(ev.artifact_uri)
    assert files == {
        "plots/progress.png",
        "videos/episode.mp4",
        "checkpoint/config.json",
        "checkpoint/sub/critic.pt",
        "reports/eval.json",
    }
    report = Path(urlparse(ev.artifact_uri).path) / "reports" / "eval.json"
    assert json.loads(report.read_text()) == {"levels": {"1-1": 0.8}}


def test_failed_stage_marks_runs_failed_and_explicit_parents(
    mlflow_uri: str, mlflow_artifact_root: str
) -> None:
    tracker = Tracker(mlflow_uri, "odyssey/rl", artifact_location=mlflow_artifact_root)
    with (
        pytest.raises(RuntimeError, match="diverged"),
        tracker.run("flow") as flow,
        tracker.stage_run("rl") as rl,
    ):
        rl.log_metric("reward", 1.5, step=0)
        raise RuntimeError("loss diverged")
    client = tracker.client
    assert client.get_run(rl.run_id).info.status == "FAILED"
    assert client.get_run(rl.run_id).data.tags["odyssey.error"] == "RuntimeError: loss diverged"
    assert client.get_run(flow.run_id).info.status == "FAILED"
    assert tracker.active_run is None

    # A task in another thread (or process) gets the parent's id explicitly.
    parent = tracker.start("flow-2")
    ids: list[str] = []

    def task(stage: str) -> None:
        with tracker.stage_run(stage, parent_run_id=parent.run_id) as run:
            run.log_metrics({"x": 1.0}, step=1)
            ids.append(run.run_id)

    threads = [threading.Thread(target=task, args=(f"eval-{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    parent.end()
    children = tracker.child_runs(parent.run_id)
    assert sorted(c.info.run_id for c in children) == sorted(ids)
    assert len(ids) == 3

"""The launch path: the launchers' command lines (exactly), the launch settings, a real torchrun
launch streaming its ranks' lines and failing with the failing rank's last lines, the metrics
follower, the CLI's launcher conventions, and a pipeline stage that trains under torchrun."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import model_fixtures
import pytest
from click.testing import CliRunner
from helpers_dist import torchrun_command

from odyssey_core.cli import main
from odyssey_core.common.run_folder import checkpoint_name
from odyssey_core.launch import (
    LaunchError,
    LaunchSettings,
    MetricsFollower,
    launcher_command,
    odyssey_command,
    run_launcher,
    sft_args,
    train_args,
)

tiny_model_dir = model_fixtures.tiny_model_dir
PY = "/venv/bin/python"
ODYSSEY = ["-m", "odyssey_core.cli", "train", "--preset", "p.yaml", "--out", "run", "--resume"]


# -- command lines ------------------------------------------------------------------------------


def test_odyssey_arguments() -> None:
    assert train_args("gtr", Path("p.yaml"), Path("run")) == [
        "train", "--recipe", "gtr", "--preset", "p.yaml", "--out", "run", "--resume",
    ]  # fmt: skip
    assert sft_args(Path("s.yaml"), Path("d"), Path("m"), Path("o"), Path("sp.json")) == [
        "sft", "--preset", "s.yaml", "--dataset", "d", "--model", "m", "--out", "o",
        "--resume", "--system-prompts", "sp.json",
    ]  # fmt: skip
    assert odyssey_command("sft", resume=False, seed=None, max_steps=3) == [
        "sft", "--max-steps", "3",
    ]  # fmt: skip


def test_torchrun_on_one_node() -> None:
    args = odyssey_command("train", preset="p.yaml", out="run", resume=True)
    assert launcher_command(LaunchSettings(nproc_per_node=8), args, python=PY) == [
        PY, "-m", "torch.distributed.run", "--nproc_per_node", "8", "--nnodes", "1",
        "--standalone", "--max_restarts", "0", "--tee", "3", *ODYSSEY,
    ]  # fmt: skip


def test_torchrun_on_the_second_of_two_nodes() -> None:
    launch = LaunchSettings(
        nproc_per_node=8, nnodes=2, node_rank=1, rdzv_endpoint="node-0.train:29500"
    )
    args = odyssey_command("train", preset="p.yaml", out="run", resume=True)
    assert launcher_command(launch, args, python=PY) == [
        PY, "-m", "torch.distributed.run", "--nproc_per_node", "8", "--nnodes", "2",
        "--node_rank", "1", "--master_addr", "node-0.train", "--master_port", "29500",
        "--max_restarts", "0", "--tee", "3", *ODYSSEY,
    ]  # fmt: skip


def test_deepspeed_launcher() -> None:
    args = odyssey_command("train", preset="p.yaml", out="run", resume=True)
    one = LaunchSettings(nproc_per_node=8, launcher="deepspeed")
    assert launcher_command(one, args, python=PY) == [
        "/venv/bin/deepspeed", "--num_gpus", "8", "--num_nodes", "1", "--no_local_rank",
        "--module", "odyssey_core.cli", *ODYSSEY[2:],
    ]  # fmt: skip
    two = LaunchSettings(
        nproc_per_node=8,
        nnodes=2,
        launcher="deepspeed",
        hostfile=Path("/etc/odyssey/hostfile"),
        rdzv_endpoint="10.0.0.1:29500",
    )
    assert launcher_command(two, args, python=PY) == [
        "/venv/bin/deepspeed", "--num_gpus", "8", "--num_nodes", "2",
        "--hostfile", "/etc/odyssey/hostfile", "--master_addr", "10.0.0.1",
        "--master_port", "29500", "--no_local_rank", "--module", "odyssey_core.cli",
        *ODYSSEY[2:],
    ]  # fmt: skip


def test_launch_settings() -> None:
    assert not LaunchSettings().launched and LaunchSettings().processes == 1
    assert LaunchSettings(nproc_per_node=8, nnodes=2, rdzv_endpoint="h:1").processes == 16
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        LaunchSettings(nnodes=2)
    with pytest.raises(ValueError, match="node_rank 2 is not below nnodes 2"):
        LaunchSettings(nnodes=2, node_rank=2, rdzv_endpoint="h:1")
    with pytest.raises(ValueError, match="HOST:PORT"):
        LaunchSettings(rdzv_endpoint="no-port")


# -- a real launch ------------------------------------------------------------------------------

_WORKER = """
import os, sys
rank = int(os.environ["RANK"])
print(f"hello from rank {rank}", flush=True)
if rank == int(sys.argv[1]):
    print(f"boom from rank {rank}", file=sys.stderr, flush=True)
    sys.exit(3)
"""


def test_a_launch_streams_every_rank_and_a_failed_rank_fails_it(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    lines: list[str] = []
    run_launcher(torchrun_command(script, -1), emit=lines.append, env=env)  # nobody fails
    assert {"[default0]:hello from rank 0", "[default1]:hello from rank 1"} <= set(lines)

    lines.clear()
    with pytest.raises(LaunchError) as caught:
        run_launcher(torchrun_command(script, 1), emit=lines.append, env=env)
    error = caught.value
    assert (error.rank, error.exitcode) == (1, 3)
    assert sorted(error.tail) == ["boom from rank 1", "hello from rank 1"]  # rank 1's only
    assert str(error).startswith("training failed: rank 1 exited with exit code 3;")
    assert "[default1]:boom from rank 1" in lines  # streamed as it came


def test_the_metrics_follower_reports_each_new_record_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 3.0}\n')  # an earlier attempt's, already reported
    seen: list[dict] = []
    follower = MetricsFollower(path, seen.append)
    with path.open("a") as f:
        f.write('{"step": 2, "loss": 2.0}\n{"step": 3, "lo')  # the last line is half written
    follower.poll(force=True)
    assert seen == [{"step": 2, "loss": 2.0}]
    path.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.5}\n')  # a resume redid 2
    follower.poll(force=True)
    follower.poll(force=True)
    assert seen == [{"step": 2, "loss": 2.0}, {"step": 2, "loss": 2.5}]


# -- the CLI takes the launchers' conventions ----------------------------------------------------


def test_the_cli_accepts_local_rank_before_and_after_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    result = CliRunner().invoke(main, ["--local_rank=3", "envs"])
    assert result.exit_code == 0, result.output
    assert os.environ["LOCAL_RANK"] == "3"
    monkeypatch.delenv("LOCAL_RANK")
    missing = tmp_path / "missing.yaml"
    for flag in ("--local_rank=1", "--local-rank=1"):
        result = CliRunner().invoke(main, ["train", flag, "--preset", str(missing), "--out", "x"])
        assert "does not exist" in result.output and "No such option" not in result.output
    result = CliRunner().invoke(main, ["sft", "--local-rank", "2", "--help"])
    assert result.exit_code == 0


# -- a pipeline stage under the launcher ---------------------------------------------------------


def test_gtr_train_stage_trains_under_torchrun_when_the_preset_asks_for_two_processes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:

    from odyssey_core.recipes.gtr.pipeline import load_gtr_pipeline_config, stage_gtr_train

    cfg = load_gtr_pipeline_config(
        "tiny",
        {
            "run_dir": str(tmp_path / "run"),
            "train": {"overrides": {"steps": 2, "launch": {"nproc_per_node": 2}}},
        },
    )
    with caplog.at_level(logging.INFO, logger="odyssey_core.stages"):
        out = stage_gtr_train(cfg)
    assert out["checkpoint"] == checkpoint_name(2)
    check_two_rank_train_stage(cfg, out, caplog, "odyssey_core.stages", "rollout/turns")


def test_espo_train_stage_trains_under_torchrun_when_the_preset_asks_for_two_processes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, tiny_model_dir: Path
) -> None:
    """ESPO's train stage through the same door as GTR's: ``odyssey train --recipe espo``
    under torchrun, its metrics followed from rank 0's metrics.jsonl into the stage run."""

    from odyssey_core.recipes.espo.pipeline import (
        load_espo_pipeline_config,
        stage_espo_data,
        stage_espo_train,
    )

    overrides = {
        "steps": 2,
        "launch": {"nproc_per_node": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {
            "samples_per_step": 2,
            "generation": {"max_new_tokens": 8},
            "history_window": 1,
        },
    }
    cfg = load_espo_pipeline_config(
        "tiny",
        {
            "run_dir": str(tmp_path / "run"),
            "sft": {"enabled": False},
            "train": {"overrides": overrides},
        },
    )
    with caplog.at_level(logging.INFO, logger="odyssey_core.stages"):
        out = stage_espo_train(cfg, stage_espo_data(cfg), None)
    check_two_rank_train_stage(cfg, out, caplog, "odyssey_core.stages", "espo/format_valid")


def check_two_rank_train_stage(
    cfg, out: dict, caplog: pytest.LogCaptureFixture, logger: str, metric: str
) -> None:
    """A two-step train stage that ran under torchrun with two ranks: rank 1's output streamed
    into the stage's log, a trainer-state shard per rank in the last checkpoint, and ``metric``
    followed from rank 0's metrics.jsonl into the stage's MLflow run at every step."""
    from mlflow import MlflowClient

    streamed = [r.getMessage() for r in caplog.records if r.name == logger]
    assert any(line.startswith("[default1]:") for line in streamed)  # rank 1's output
    assert out["steps"] == 2
    train_dir = next((cfg.run_dir / "train").glob("run-*"))
    checkpoint = train_dir / "checkpoints" / checkpoint_name(2)
    assert (checkpoint / "trainer_state.rank-00001.pt").is_file()
    client = MlflowClient(cfg.mlflow_uri)
    experiment = client.get_experiment_by_name(cfg.experiment)
    (run,) = client.search_runs([experiment.experiment_id], "tags.`odyssey.stage` = 'train'")
    history = client.get_metric_history(run.info.run_id, metric)
    assert [m.step for m in history] == [1, 2]  # every step, followed from metrics.jsonl
    metrics = [json.loads(line) for line in (train_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m[metric] for m in metrics] == [m.value for m in history]

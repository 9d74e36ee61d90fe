"""ESPO through the doors the other recipes use: ``odyssey train --recipe espo`` in one process
and as two gloo ranks under torchrun on the CPU (rank 0 generates the run's demonstrations
before any rank reads them), a run SIGKILLed while its second step runs resumes to the
uninterrupted run's weights, and rollouts come from a real ``odyssey serve`` subprocess with
the trainer's weights pushed to it after every update.

ESPO's rewards are the demonstrations' own (a random tiny model earns none), so these presets
add a small entropy bonus: every update then moves the weights by an amount that depends on
the sampled tokens, which is what a resume or a launch could get wrong.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import model_fixtures
import pytest
import torch
import yaml
from click.testing import CliRunner
from helpers_persona import tiny_dataset
from helpers_resume import kill_during_step_two
from safetensors.torch import load_file

from odyssey_core.cli import main
from odyssey_core.common.run_folder import checkpoint_name
from odyssey_core.launch import LaunchSettings, launcher_command, run_launcher, train_args
from odyssey_core.models.loading import load_model
from odyssey_core.policy.weight_sync import RolloutPolicy, export_weights, weights_checksum
from odyssey_core.recipes.espo.settings import load_espo_settings
from odyssey_core.recipes.espo.train import build_trainer
from odyssey_core.rl.checkpoint import latest_checkpoint, load_trainer_state, policy_dir
from odyssey_core.serve.app import ServerProcess

torch.set_num_threads(1)  # tiny models on a busy machine (see tests/model_fixtures.py)
tiny_model_dir = model_fixtures.tiny_model_dir
ROOT = Path(__file__).resolve().parents[3]
STEPS = 3


def espo_preset(folder: Path, model: Path, dataset: Path | None, **changes: Any) -> Path:
    """The tiny preset on the test model: 2 samples of one demonstration per step, 8 new
    tokens, a checkpoint after every step, an entropy bonus."""
    data = {
        "inherit": str(ROOT / "configs" / "espo" / "tiny.yaml"),
        "steps": STEPS,
        "checkpoint_every": 1,
        "model": {"path": str(model)},
        "data": {"dataset": None if dataset is None else str(dataset)},
        "rollout": {
            "samples_per_step": 2,
            "episodes_per_step": 1,
            "generation": {"max_new_tokens": 8},
            "history_window": 1,
            "score_micro_batch": 2,
        },
        "ppo": {"lr": 1e-3, "entropy_coef": 0.05},
        **changes,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "espo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(*args: str) -> list[dict[str, Any]]:
    """``odyssey train --recipe espo ARGS`` in this process; its stdout's JSON step lines."""
    result = CliRunner().invoke(main, ["train", "--recipe", "espo", "--threads", "1", *args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    checkpoint = latest_checkpoint(out)
    assert checkpoint is not None and checkpoint.name == checkpoint_name(STEPS)
    return load_file(policy_dir(checkpoint) / "model.safetensors")


def metric_steps(out: Path) -> list[float]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("persona") / "tiny")


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, dataset: Path
) -> dict[str, Any]:
    """One uninterrupted run of ``odyssey train --recipe espo`` in one process."""
    folder = tmp_path_factory.mktemp("espo-reference")
    preset = espo_preset(folder, tiny_model_dir, dataset)
    echoed = train("--preset", str(preset), "--out", str(folder / "run"))
    return {"preset": preset, "out": folder / "run", "echoed": echoed}


def test_odyssey_train_recipe_espo_trains_in_one_process(
    reference: dict[str, Any], tiny_model_dir: Path
) -> None:
    out = reference["out"]
    assert [line["step"] for line in reference["echoed"]] == [1, 2, 3]
    assert metric_steps(out) == [1.0, 2.0, 3.0]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for record in records:  # ESPO's own metrics and the collapse monitor's, every step
        assert {"espo/format_valid", "collapse/valid_rate", "collapse/turns", "adv/mean"} <= set(
            record
        )
        assert record["actor/updates"] >= 1
    trained, start = final_weights(out), load_file(tiny_model_dir / "model.safetensors")
    assert any(not torch.equal(start[k], trained[k]) for k in start), "nothing trained"
    saved = json.loads((latest_checkpoint(out) / "config.json").read_text())
    assert saved["steps"] == STEPS and saved["launch"]["nproc_per_node"] == 1


@pytest.mark.slow
def test_a_killed_espo_run_resumes_to_the_uninterrupted_runs_weights(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    killed = tmp_path / "killed"
    code = (
        "import sys; from odyssey_core.cli import main; main(['train', '--recipe', 'espo', "
        "'--preset', sys.argv[1], '--out', sys.argv[2], '--threads', '1'])"
    )
    kill_during_step_two(code, killed, reference["preset"], killed)
    assert int(load_trainer_state(latest_checkpoint(killed))["step"]) == 1

    echoed = train("--preset", str(reference["preset"]), "--out", str(killed), "--resume")
    assert [line["step"] for line in echoed] == [2, 3]
    want, got = final_weights(reference["out"]), final_weights(killed)
    assert want.keys() == got.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6, msg=key)
    assert metric_steps(killed) == [1.0, 2.0, 3.0]  # each step once, as uninterrupted


@pytest.mark.slow
def test_two_ranks_under_torchrun_train_one_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``odyssey train --recipe espo`` on two gloo ranks: with ``data.dataset: null`` rank 0
    generates the demonstrations into the run before either rank reads them; each rank plays
    one of the two samples of the step's demonstration and the estimator sees both."""
    preset = espo_preset(tmp_path, tiny_model_dir, None, steps=2)
    out = tmp_path / "run"
    cmd = launcher_command(LaunchSettings(nproc_per_node=2), train_args("espo", preset, out))
    lines: list[str] = []
    run_launcher(cmd, emit=lines.append, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert any(line.startswith("[default1]:") for line in lines)
    checkpoint = latest_checkpoint(out)
    assert checkpoint is not None and checkpoint.name == checkpoint_name(2)
    states = [load_trainer_state(checkpoint, rank) for rank in (0, 1)]
    assert [s["world_size"] for s in states] == [2, 2] and [s["rank"] for s in states] == [0, 1]
    assert [p.name for p in out.iterdir() if (p / "manifest.json").is_file()] == ["tiny-seed0"]
    settings = load_espo_settings(preset, {"data": {"dataset": str(out / "tiny-seed0")}})
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1.0, 2.0]
    # the union of the ranks' turns: both samples of one demonstration, every step of it
    group_turns = records[0]["rollout/turn_samples_total"]
    assert group_turns % settings.rollout.samples_per_step == 0
    assert records[1]["rollout/turn_samples_total"] > group_turns
    start = load_file(tiny_model_dir / "model.safetensors")
    trained = load_file(policy_dir(checkpoint) / "model.safetensors")
    assert any(not torch.equal(start[k], trained[k]) for k in start), "nothing trained"


# -- rollouts from odyssey serve ------------------------------------------------------------------

KEY = "espo-test-key"  # the server's weight routes need a key (and a root to read from)


@pytest.mark.slow
def test_espo_run_with_openai_backend_syncs_weights_every_step(
    tiny_model_dir: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    args = ["--model-name", "tiny", "--threads", "1", "--max-batch-size", "8"]
    args += ["--weights-root", str(out)]
    server = ServerProcess.odyssey(
        tiny_model_dir, tmp_path / "serve.log", args=args, env={"ODYSSEY_API_KEY": KEY}
    )
    monkeypatch.setenv("ESPO_TEST_SERVER_KEY", KEY)
    with server:

        def served_checksum() -> dict:
            answer = httpx.get(
                f"{server.url}/v1/weights/checksum",
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=60.0,
            )
            answer.raise_for_status()
            return answer.json()

        before = served_checksum()
        backend = {
            "kind": "openai",
            "base_url": server.base_url,
            "server": "odyssey",
            "concurrency": 4,
            "api_key_env": "ESPO_TEST_SERVER_KEY",
        }
        preset = espo_preset(tmp_path, tiny_model_dir, dataset, steps=2)
        settings = load_espo_settings(preset, {"rollout": {"backend": backend}})
        trainer_sums: list[str] = []
        server_sums: list[dict] = []

        def after_step(step: int, metrics: dict[str, float]) -> None:
            trainer_sums.append(weights_checksum(export_weights(trainer.policy.model)).value)
            server_sums.append(served_checksum())

        trainer = build_trainer(settings, out, callbacks=[after_step])
        assert isinstance(trainer.collector.policy, RolloutPolicy)
        assert trainer.policy is trainer.collector.policy.trainer_policy  # it scores
        try:
            history = trainer.train()
        finally:
            trainer.close()

    start = weights_checksum(export_weights(load_model(tiny_model_dir))).value
    assert before["checksum"]["value"] == start  # the server starts on the checkpoint
    assert len(history) == 2
    assert [s["checksum"]["value"] for s in server_sums] == trainer_sums
    assert len({start, *trainer_sums}) == 3  # each update changed the weights
    assert [s["version"] for s in server_sums] == [2, 3]  # a push before the first rollout
    for metrics in history:
        assert metrics["weight_sync/verified"] == 1.0
        assert metrics["rollout/engine_prompt_mismatch_frac"] == 0.0
        assert metrics["actor/old_vs_behaviour_logprob_abs"] < 1e-3

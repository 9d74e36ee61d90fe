"""Rank-aware RL on two CPU ranks (gloo, torchrun): different trajectories per rank, the same
weights on every rank, a two-rank step equal to a one-rank step on the union of the same
trajectories, and a SIGKILLed rank -> a clean failure -> a resume to the uninterrupted run's
weights.

One two-rank run (the Odysseus tiny setting: 4 trajectories per step, 2 per rank, 3 turns,
ppo_critic_pos, minibatches of 3 turns) serves every test of this module.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import model_fixtures
import pytest
import torch
from helpers_dist import REPO, StepRecorder, UnionCollector, rank_pid, run_on_ranks
from helpers_presets import odysseus_preset
from safetensors.torch import load_file

from odyssey_core.launch import (
    LaunchError,
    LaunchSettings,
    launcher_command,
    run_launcher,
    train_args,
)
from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.checkpoint import checkpoint_name, load_trainer_state

tiny_model_dir = model_fixtures.tiny_model_dir
STEPS = 3

_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from pathlib import Path
folder, preset, tests = map(Path, sys.argv[1:4])
sys.path.insert(0, str(tests))
from helpers_dist import StepRecorder
from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.distributed import join_launched_world, leave_process_group

world = join_launched_world("cpu")
trainer = build_trainer(load_train_settings(preset), folder / "run")
recorder = StepRecorder(folder, world.rank)
trainer.hooks.append(recorder)
trainer.train()
trainer.close()
(folder / f"rank-{world.rank}.json").write_text(json.dumps({"steps": recorder.steps}))
leave_process_group()
"""


def _preset(folder: Path, model: Path) -> Path:
    return odysseus_preset(
        folder,
        model,
        steps=STEPS,
        rollout={
            "num_trajectories": 4,  # 2 per rank
            "max_turns": 3,
            "n_envs": 2,
            "generation": {"temperature": 1.0, "max_new_tokens": 8},
            "score_micro_batch": 2,
        },
        ppo={"minibatch_size": 3, "lr": 1e-3},  # several minibatches, split unevenly by rank
        # one frame per critic forward: V(o_t) does not depend on which frames share a batch
        critic={"input_height": 36, "input_width": 40, "minibatch_size": 4, "predict_chunk": 1},
    )


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("two-ranks")
    preset = _preset(folder, tiny_model_dir)
    ranks = run_on_ranks(_SCRIPT, folder, preset, REPO / "tests")
    return {"folder": folder, "preset": preset, "ranks": ranks}


def _weights(folder: Path, step: int, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(folder / f"weights-{step}-rank{rank}.pt", weights_only=True)


def test_ranks_collect_different_trajectories_and_keep_identical_weights(
    two_ranks: dict[str, Any], tiny_model_dir: Path
) -> None:
    folder = two_ranks["folder"]
    first, second = two_ranks["ranks"]
    initial = load_file(tiny_model_dir / "model.safetensors")
    for step in range(STEPS):
        a, b = first["steps"][step], second["steps"][step]
        assert not set(a["env_seeds"]) & set(b["env_seeds"])  # distinct episodes
        assert a["responses"] != b["responses"]
        # both ranks computed the same advantages over the union of their turns
        assert a["union_advantages"] == b["union_advantages"]
        assert len(a["union_advantages"]) == a["turns"] + b["turns"]
        w0, w1 = _weights(folder, step + 1, 0), _weights(folder, step + 1, 1)
        assert all(torch.equal(w0[k], w1[k]) for k in w0), f"ranks differ after step {step + 1}"
    last = _weights(folder, STEPS, 0)
    assert any(not torch.equal(initial[k], last[k]) for k in initial), "nothing trained"


def test_a_two_rank_step_equals_a_one_rank_step_on_the_union(
    two_ranks: dict[str, Any], tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The one-rank trainer collects both ranks' shares (their starts and seeds) and trains on
    the joined batch. ppo_critic_pos divides by sigma over the positive advantages of the whole
    batch, so this holds only if the two ranks' estimator saw the union. Tolerance 1e-6 on the
    weights after Adam's first step (the ranks score different micro-batches and sum the
    gradients in another order)."""
    trainer = build_trainer(load_train_settings(two_ranks["preset"]), tmp_path / "one")
    trainer.collector = UnionCollector(trainer.collector, ranks=2)  # type: ignore[assignment]
    recorder = StepRecorder(tmp_path, rank=0)
    trainer.hooks.append(recorder)  # type: ignore[arg-type]
    metrics = trainer.train_step()
    trainer.close()
    two_rank_step = two_ranks["ranks"][0]["steps"][0]
    # the same turns, hence the same batch-wide statistics
    assert recorder.steps[0]["union_advantages"] == two_rank_step["union_advantages"]
    assert metrics["actor/updates"] >= 2
    one_rank = trainer.policy.model.state_dict()
    two_rank = _weights(two_ranks["folder"], 1, 0)
    for key, value in two_rank.items():
        torch.testing.assert_close(one_rank[key], value, rtol=0, atol=1e-6, msg=key)
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert any(not torch.equal(initial[k], one_rank[k]) for k in initial), "nothing trained"


def _kill_rank_after_first_checkpoint(out: Path, rank: int, timeout_s: float = 240) -> None:
    pointer = out / "checkpoints" / "latest"
    deadline = time.monotonic() + timeout_s
    while not (pointer.is_file() and pointer.read_text().strip() == checkpoint_name(1)):
        assert time.monotonic() < deadline, "no step-1 checkpoint in time"
        time.sleep(0.01)
    pid = rank_pid(out, rank)
    assert pid is not None, f"rank {rank} is gone before step 2"
    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigkill_of_one_rank_fails_the_launch_and_resume_reaches_the_same_weights(
    two_ranks: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "killed"
    cmd = launcher_command(
        LaunchSettings(nproc_per_node=2), train_args("odysseus", two_ranks["preset"], out)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    lines: list[str] = []
    failure: list[BaseException] = []

    def launch() -> None:
        try:
            run_launcher(cmd, emit=lines.append, env=env, cwd=REPO)
        except BaseException as err:
            failure.append(err)

    worker = threading.Thread(target=launch)
    worker.start()
    try:
        _kill_rank_after_first_checkpoint(out, rank=1)
    finally:
        worker.join(timeout=300)
    assert len(failure) == 1 and isinstance(failure[0], LaunchError), lines[-20:]
    error = failure[0]
    assert error.rank == 1 and error.exitcode == -signal.SIGKILL
    assert "rank 1 exited with exit code -9 (SIGKILL)" in str(error)
    assert not (out / "checkpoints" / checkpoint_name(2)).exists(), "killed too late"

    run_launcher(cmd, emit=lines.append, env=env, cwd=REPO)  # the same command resumes
    reference = two_ranks["folder"] / "run" / "checkpoints" / checkpoint_name(STEPS)
    resumed = out / "checkpoints" / checkpoint_name(STEPS)
    expected = load_file(reference / "policy" / "model.safetensors")
    got = load_file(resumed / "policy" / "model.safetensors")
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    for rank in (0, 1):  # every rank's critic and minibatch generator continued exactly
        a, b = load_trainer_state(reference, rank), load_trainer_state(resumed, rank)
        critic_a, critic_b = a["value_function"]["critic"], b["value_function"]["critic"]
        assert all(torch.equal(critic_a["network"][k], v) for k, v in critic_b["network"].items())
        assert torch.equal(a["generator"], b["generator"])  # the minibatch draws
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1.0, 2.0, 3.0]

"""DeepSpeed ZeRO-2 RL runs resume, on one rank and on two (CPU, gloo).

Each world trains 2 steps straight, and 1 step, then a resume to step 2 in a new trainer that
reads the step-1 checkpoint (DeepSpeed's own checkpoint for the engine, every file read with
``weights_only=True``); the weights must agree exactly. The one-rank world is a plain process
that no launcher started: it must set up its own one-process world instead of looking for MPI.
On two ranks the minibatches give the ranks different numbers of micro-batches, so the
zero-loss padding that keeps ZeRO-2's per-backward reductions in step is exercised too.
"""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
from helpers_dist import REPO, run_alone, run_on_ranks
from helpers_presets import odysseus_preset

tiny_model_dir = model_fixtures.tiny_model_dir

_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from pathlib import Path
from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.distributed import current_world, leave_process_group
from safetensors.torch import load_file

folder, preset = map(Path, sys.argv[1:3])

def run(out, steps, resume=False):
    trainer = build_trainer(load_train_settings(preset, {"steps": steps}), out, resume=resume)
    start = trainer.step
    trainer.train()
    trainer.close()
    return trainer, start

whole, _ = run(folder / "whole", 2)
run(folder / "split", 1)
resumed, start = run(folder / "split", 2, resume=True)
a, b = whole.policy.model.state_dict(), resumed.policy.model.state_dict()
initial = load_train_settings(preset).model.path / "model.safetensors"
world = current_world()
(folder / f"rank-{world.rank}.json").write_text(json.dumps({
    "diff": max(float((a[k] - b[k]).abs().max()) for k in a),
    "start": start,
    "world": world.size,
    "sum": float(sum(v.double().sum() for v in b.values())),
    "trained": max(float((load_file(initial)[k] - a[k]).abs().max()) for k in a),
}))
leave_process_group()
"""


def _preset(folder: Path, model: Path) -> Path:
    return odysseus_preset(
        folder,
        model,
        steps=2,
        deepspeed=str(REPO / "configs" / "deepspeed" / "zero2.json"),
        rollout={
            "num_trajectories": 4,
            "max_turns": 3,
            "n_envs": 2,
            "generation": {"temperature": 1.0, "max_new_tokens": 8},
            "score_micro_batch": 2,
        },
        ppo={"minibatch_size": 3, "lr": 1e-3},
    )


def test_one_rank_deepspeed_run_without_a_launcher_resumes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    pytest.importorskip("deepspeed")
    result = run_alone(_SCRIPT, tmp_path, _preset(tmp_path, tiny_model_dir))
    assert result["world"] == 1 and result["start"] == 1
    assert result["diff"] == 0.0 and result["trained"] > 0


@pytest.mark.slow
def test_two_rank_deepspeed_run_resumes(tmp_path: Path, tiny_model_dir: Path) -> None:
    pytest.importorskip("deepspeed")
    ranks = run_on_ranks(_SCRIPT, tmp_path, _preset(tmp_path, tiny_model_dir))
    assert [r["world"] for r in ranks] == [2, 2] and [r["start"] for r in ranks] == [1, 1]
    assert [r["diff"] for r in ranks] == [0.0, 0.0] and ranks[0]["trained"] > 0
    assert ranks[0]["sum"] == ranks[1]["sum"]  # the same weights on both ranks

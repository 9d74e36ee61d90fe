"""The SFT trainer under DeepSpeed ZeRO-2, single-process on the CPU (gloo), against plain AdamW."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
from helpers_dist import REPO, run_in_single_process_world

from bench.sft_tiny import build_odland_dataset

tiny_model_dir = model_fixtures.tiny_model_dir

# Both runs in one subprocess, so the process group DeepSpeed starts does not outlive the test.
_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from pathlib import Path
from odyssey_core.sft.settings import SFTSettings
from odyssey_core.sft.trainer import SFTTrainer
dataset, model, out, zero2 = map(Path, sys.argv[1:5])
base = dict(batch_size=4, grad_accum_steps=2, lr=2e-3, warmup_ratio=0.0, precision="fp32",
            device="cpu", epochs=5, max_steps=2, checkpoint_every=100, eval_every=0)
weights, losses = [], []
for name, extra in (("plain", {}), ("ds", {"deepspeed": str(zero2)})):
    trainer = SFTTrainer(SFTSettings(**base, **extra), dataset, model, out / name)
    result = trainer.train()
    weights.append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
    losses.append(result.train_loss)
diff = max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0])
print(json.dumps({"diff": diff, "losses": losses}))
"""


@pytest.mark.slow
def test_zero2_sft_steps_match_plain_adamw(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two optimizer steps with gradient accumulation under a ZeRO-2 engine (world size 1)
    leave the same weights and loss as the plain trainer."""
    pytest.importorskip("deepspeed")
    dataset = build_odland_dataset(tmp_path / "data", 16, val_fraction=0.25)
    zero2 = REPO / "configs" / "deepspeed" / "zero2.json"
    result = run_in_single_process_world(_SCRIPT, dataset, tiny_model_dir, tmp_path, zero2)
    assert result["diff"] < 1e-5
    plain_loss, ds_loss = result["losses"]
    assert ds_loss == pytest.approx(plain_loss, rel=1e-5)

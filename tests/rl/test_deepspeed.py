"""Both recipes' updates under a DeepSpeed ZeRO-2 engine (world size 1, gloo, CPU) equal the
plain AdamW step, and a one-rank DeepSpeed checkpoint resumes.

Each runs in a subprocess so the process group does not outlive the test. The first run on a
machine JIT-compiles DeepSpeed's CPU shared-memory comm op (minutes); later runs reuse it.
"""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
from helpers_dist import run_in_single_process_world
from helpers_presets import REPO, gtr_preset, odysseus_preset

tiny_model_dir = model_fixtures.tiny_model_dir

_SCRIPT = """
import importlib, json, sys, torch
torch.set_num_threads(1)
from pathlib import Path
recipe, loader = sys.argv[1:3]
load = getattr(importlib.import_module(f"odyssey_core.recipes.{recipe}.settings"), loader)
build_trainer = importlib.import_module(f"odyssey_core.recipes.{recipe}.train").build_trainer
out, plain_preset, ds_preset = map(Path, sys.argv[3:6])
weights, losses = [], []
for name, preset in (("plain", plain_preset), ("ds", ds_preset)):
    trainer = build_trainer(load(preset), out / name)
    metrics = trainer.train_step()
    trainer.save()
    trainer.close()
    weights.append({k: v.clone() for k, v in trainer.policy.model.state_dict().items()})
    losses.append(metrics["actor/loss"])
resumed = build_trainer(load(ds_preset), out / "ds", resume=True)
same = all(torch.equal(resumed.policy.model.state_dict()[k], v) for k, v in weights[1].items())
diff = max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0])
print(json.dumps({"diff": diff, "losses": losses, "resumed_step": resumed.step, "same": same}))
"""

RECIPES = {
    # recipe: (settings loader, preset writer); GTR's step adds thought cloning and its schedule
    "odysseus": ("load_train_settings", odysseus_preset),
    "gtr": ("load_gtr_settings", gtr_preset),
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_deepspeed_zero2_update_matches_plain_and_resumes(
    recipe: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    pytest.importorskip("deepspeed")
    loader, write_preset = RECIPES[recipe]
    zero2 = REPO / "configs" / "deepspeed" / "zero2.json"
    plain = write_preset(tmp_path, tiny_model_dir, "plain.yaml", steps=1)
    ds = write_preset(tmp_path, tiny_model_dir, "ds.yaml", steps=1, deepspeed=str(zero2))
    result = run_in_single_process_world(_SCRIPT, recipe, loader, tmp_path, plain, ds)
    assert result["diff"] < 1e-5
    plain_loss, ds_loss = result["losses"]
    assert ds_loss == pytest.approx(plain_loss, rel=1e-5)
    assert result["resumed_step"] == 1 and result["same"]

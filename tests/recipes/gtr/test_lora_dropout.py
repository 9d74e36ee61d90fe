"""GTR's LoRA dropout (Table 2: 0.05) is live in the update's forward passes and off in
rollouts, old log-probs and evaluation, which run the policy in eval mode."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import numpy as np
import pytest
import torch

from odyssey_core.envs.base import Observation
from odyssey_core.models.lora import LoraSettings, lora_dropout_active, lora_dropout_modules
from odyssey_core.recipes.gtr.settings import load_gtr_settings
from odyssey_core.recipes.gtr.train import build_trainer
from odyssey_core.rl.policy import build_policy

torch.set_num_threads(1)  # see model_fixtures: tiny models on a busy machine
tiny_model_dir = model_fixtures.tiny_model_dir
CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "gtr"
FRAME = np.full((32, 48, 3), 90, dtype=np.uint8)


def _lora_policy(tiny_model_dir: Path, tmp_path: Path, dropout: float):
    settings = LoraSettings(r=4, alpha=8, dropout=dropout)
    policy = build_policy(
        load_gtr_settings("tiny", {"model": {"path": str(tiny_model_dir)}}).model,
        settings,
        tmp_path,
    )
    # a fresh adapter's B is zero (it changes nothing): give it weights so dropping its input
    # moves the output
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    return policy


def _score(policy) -> torch.Tensor:
    inputs, _ = policy.encode([Observation(image=FRAME, text="Reach 3. Legal actions: 1, 2.")])
    prompt = inputs["input_ids"][0][inputs["attention_mask"][0].bool()].tolist()
    answer = policy.tokenizer.encode('{"thoughts": "up", "action": "1"}', add_special_tokens=False)
    with torch.no_grad():
        return policy.score([prompt], [answer], [FRAME])[0]


def test_lora_dropout_changes_training_outputs_and_not_eval_ones(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    policy = _lora_policy(tiny_model_dir, tmp_path, dropout=0.5)
    dropouts = lora_dropout_modules(policy.model)
    assert dropouts and not policy.model.training  # the policy is built in eval mode
    torch.manual_seed(0)
    eval_a, eval_b = _score(policy), _score(policy)
    assert torch.equal(eval_a, eval_b)  # eval mode: deterministic, nothing dropped
    with lora_dropout_active(policy.model) as active:
        assert active == dropouts and all(d.training for d in dropouts)
        train_a, train_b = _score(policy), _score(policy)
        # only LoRA's dropout switched on: the rest of the model keeps eval mode
        others = [m for m in policy.model.modules() if m.training and m not in dropouts]
        assert others == []
    assert not torch.allclose(train_a, eval_a) and not torch.allclose(train_a, train_b)
    assert not any(d.training for d in dropouts)  # restored on exit
    assert torch.equal(_score(policy), eval_a)
    # a zero rate builds no dropout at all: nothing to switch on
    no_dropout = _lora_policy(tiny_model_dir, tmp_path / "zero", dropout=0.0)
    assert lora_dropout_modules(no_dropout.model) == []


def test_a_gtr_step_drops_in_the_update_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Every forward through a LoRA dropout with gradients (PPO pieces, thought cloning) has it
    on; every one without (rollout generation, old log-probs, value predictions) has it off."""
    overrides = {
        "model": {"path": str(tiny_model_dir)},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.05},
        "value": {"source": "vlm_head"},
    }
    trainer = build_trainer(load_gtr_settings(CONFIGS / "tiny.yaml", overrides), tmp_path)
    dropouts = lora_dropout_modules(trainer.policy.model)
    assert dropouts and all(d.p == pytest.approx(0.05) for d in dropouts)
    seen: list[tuple[bool, bool]] = []  # (dropout on, gradients on) per forward

    def record(module: torch.nn.Module, _inputs: object, _output: object) -> None:
        seen.append((module.training, torch.is_grad_enabled()))

    handle = dropouts[0].register_forward_hook(record)
    try:
        metrics = trainer.train_step()
    finally:
        handle.remove()
        trainer.close()
    assert metrics["actor/updates"] >= 1
    with_grad = [on for on, grad in seen if grad]
    without_grad = [on for on, grad in seen if not grad]
    assert with_grad and all(with_grad)
    assert without_grad and not any(without_grad)
    assert not any(d.training for d in dropouts) and not trainer.policy.model.training

"""``model.gradient_checkpointing``: the actor recomputes its blocks' activations in the
backward pass although RL keeps it in eval mode, with gradients identical to keeping them."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import numpy as np
import torch
from model_fixtures import make_observations

from odyssey_core.models.lora import LoraSettings
from odyssey_core.policy import GenerationParams
from odyssey_core.rl.policy import build_policy
from odyssey_core.rl.settings import ModelSettings

tiny_model_dir = model_fixtures.tiny_model_dir


def _turns(policy) -> tuple[list[list[int]], list[list[int]], list[np.ndarray]]:
    observations = make_observations(["Level 1-1.", "Level 2-3, turn 7.", "Level 4-1."])
    generated = policy.generate(observations, GenerationParams(max_new_tokens=4, seed=0))
    return (
        [g.prompt_ids for g in generated],
        [g.response_ids for g in generated],
        [o.image for o in observations],
    )


def _backward(policy, turns) -> tuple[dict[str, torch.Tensor], int, list[str]]:
    """Gradients of the summed log-probs, bytes of tensors kept for the backward outside
    checkpointed regions, and the attention modules that ran during the backward."""
    model = policy.model
    model.zero_grad(set_to_none=True)
    saved_bytes = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved_bytes
        saved_bytes += tensor.numel() * tensor.element_size()
        return tensor

    replayed: list[str] = []
    in_backward = False
    hooks = [
        module.register_forward_hook(
            lambda *_a, n=name: replayed.append(n) if in_backward else None
        )
        for name, module in model.named_modules()
        if name.endswith(("self_attn", ".attn"))
    ]
    with torch.enable_grad():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            scores = policy.score(*turns, temperature=1.0, micro_batch_size=3)
        in_backward = True
        torch.stack([s.sum() for s in scores]).sum().backward()
    for hook in hooks:
        hook.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return grads, saved_bytes, replayed


def test_checkpointing_recomputes_in_eval_mode_with_identical_gradients(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    plain = build_policy(ModelSettings(path=tiny_model_dir), None, tmp_path)
    ckpt = build_policy(
        ModelSettings(path=tiny_model_dir, gradient_checkpointing=True), None, tmp_path
    )
    assert not plain.model.training and not ckpt.model.training  # RL's eval mode
    turns = _turns(plain)

    grads, kept, replayed = _backward(plain, turns)
    ckpt_grads, ckpt_kept, ckpt_replayed = _backward(ckpt, turns)
    assert replayed == []
    # every text layer and vision block replays its forward once, in the backward
    blocks = [n for n, _ in ckpt.model.named_modules() if n.endswith(("self_attn", ".attn"))]
    assert sorted(ckpt_replayed) == sorted(blocks) and len(blocks) == 4
    assert ckpt_kept < kept / 2  # measured: about a fifth on the tiny model
    assert grads.keys() == ckpt_grads.keys() and len(grads) == 64
    for name, grad in grads.items():
        assert torch.equal(grad, ckpt_grads[name]), name

    # generate's eval()/train() switching does not turn it off; the log-probs are unchanged
    _turns(ckpt)
    assert _backward(ckpt, turns)[2] == ckpt_replayed


def test_checkpointing_with_lora_trains_the_same_adapters(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    lora = LoraSettings(r=4)
    plain = build_policy(ModelSettings(path=tiny_model_dir), lora, tmp_path)
    ckpt = build_policy(
        ModelSettings(path=tiny_model_dir, gradient_checkpointing=True), lora, tmp_path
    )
    ckpt.model.load_state_dict(plain.model.state_dict())  # the same random adapters
    turns = _turns(plain)
    grads, _, _ = _backward(plain, turns)
    ckpt_grads, _, replayed = _backward(ckpt, turns)
    assert replayed and grads and all("lora_" in n for n in grads)
    assert grads.keys() == ckpt_grads.keys()
    for name, grad in grads.items():
        assert torch.equal(grad, ckpt_grads[name]), name

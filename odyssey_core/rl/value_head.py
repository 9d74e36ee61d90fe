"""A value head on the VLM: V(o_t) from the policy's own final hidden state (GTR Table 2's
"PPO value loss coefficient" weighs its loss inside the PPO objective).

Where the state is read: the hidden state of the **last prompt token**, after the language
model's final norm (what the LM head reads). Why there and not the mean over response tokens:

* V(o_t) must be a function of the observation alone. At the last prompt token the model has
  attended to the whole frame and task text and nothing it sampled; a mean over the response
  would make the value depend on the action taken (a Q-like quantity), which biases GAE.
* GAE bootstraps with V(o_{t+1}) after a truncation, where no response exists yet; the last
  prompt token is defined for every observation.
* Causal attention makes the state at that position identical whether the forward pass saw
  only the prompt or prompt + response, so the PPO scoring pass that already runs over prompt
  + response yields the value too: one forward, one backward for policy and value.

The state is captured with a forward hook on the final norm, so :class:`HFPolicy` needs no
changes; :func:`last_prompt_states` relies on ``HFPolicy.score`` left-padding each micro-batch
(the responses end every row), which ``tests/rl/test_value_functions.py`` checks against a
prompt-only pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "VLMValueHead",
    "capture_final_hidden",
    "final_norm",
    "last_prompt_states",
]

_FINAL_NORM_SUFFIX = "language_model.norm"


def final_norm(model: nn.Module) -> nn.Module:
    """The language model's final norm (under any PEFT wrapper): its output feeds the LM head."""
    for name, module in model.named_modules():
        if name.endswith(_FINAL_NORM_SUFFIX):
            return module
    raise ValueError(f"no module named '*{_FINAL_NORM_SUFFIX}' in {type(model).__name__}")


@contextmanager
def capture_final_hidden(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the final-norm output ``[B, L, H]`` of every forward run inside the block."""
    captured: list[torch.Tensor] = []

    def hook(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        captured.append(output)

    handle = final_norm(model).register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def last_prompt_states(
    captured: Sequence[torch.Tensor], response_lengths: Sequence[int]
) -> torch.Tensor:
    """``[N, H]``: each item's state at its last prompt token, from left-padded forwards.

    ``captured`` holds one ``[b, L, H]`` tensor per micro-batch, in item order; with left
    padding an item with ``r`` response tokens has its last prompt token at ``L - r - 1``.
    """
    rows: list[torch.Tensor] = []
    item = 0
    for hidden in captured:
        length = hidden.shape[1]
        for b in range(hidden.shape[0]):
            rows.append(hidden[b, length - int(response_lengths[item]) - 1])
            item += 1
    if item != len(response_lengths):
        raise RuntimeError(f"captured {item} items for {len(response_lengths)} responses")
    return torch.stack(rows)


class VLMValueHead(nn.Module):
    """hidden state ``[N, H]`` -> value ``[N]`` in scaled units (returns / ``scale``)."""

    def __init__(
        self, hidden_size: int, hidden_dims: Sequence[int] = (1024, 512), scale: float = 1.0
    ) -> None:
        super().__init__()
        self.scale = float(scale)
        layers: list[nn.Module] = []
        width = hidden_size
        for dim in hidden_dims:
            layers += [self._init(nn.Linear(width, dim), math.sqrt(2)), nn.ReLU()]
            width = dim
        # A small last layer: the first values are near 0, so early advantages are the rewards.
        layers.append(self._init(nn.Linear(width, 1), 0.01))
        self.net = nn.Sequential(*layers)

    @staticmethod
    def _init(layer: nn.Linear, gain: float) -> nn.Linear:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        return layer

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # The head stays float32 whatever the VLM runs in: bf16 regression loses too much.
        return self.net(hidden.float()).squeeze(-1)

    def from_captured(
        self, captured: Sequence[torch.Tensor], response_lengths: Sequence[int]
    ) -> torch.Tensor:
        """Scaled values of the items whose forwards were captured (keeps gradients)."""
        return self(last_prompt_states(captured, response_lengths))

    def loss(self, predicted: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        """RL4VLM's value loss: 0.5 * MSE between V = scale * ``predicted`` and the unscaled
        returns. ``scale`` sets the head's output units only, never the loss's, so a value
        coefficient (GTR Table 2: 0.5) weighs it against the policy loss as it does there."""
        target = returns.to(predicted.device, predicted.dtype)
        return 0.5 * F.mse_loss(predicted * self.scale, target)

    @torch.no_grad()
    def predict(
        self,
        policy: Any,
        prompt_ids: Sequence[Sequence[int]],
        frames: Sequence[Any],
        micro_batch_size: int = 4,
    ) -> torch.Tensor:
        """V(o) in return units, float32 [N] on the CPU, from prompt-only forward passes."""
        if not prompt_ids:
            return torch.zeros(0)
        empty: list[list[int]] = [[] for _ in prompt_ids]
        with capture_final_hidden(policy.model) as captured:
            policy.score(prompt_ids, empty, frames, 1.0, micro_batch_size)
        values = self.from_captured(captured, [0] * len(prompt_ids))
        return values.float().cpu() * self.scale

"""GTR's value loss is RL4VLM's: 0.5 * MSE on unscaled returns, whatever ``value.scale`` is, so
Table 2's value coefficient 0.5 weighs it as it does there."""

from __future__ import annotations

import pytest
import torch

from odyssey_core.rl.value_head import VLMValueHead


def linear_head(scale: float) -> VLMValueHead:
    """A linear head (no hidden layers) with weights [1, 2] and bias 0.5."""
    head = VLMValueHead(hidden_size=2, hidden_dims=(), scale=scale)
    layer = head.net[0]
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0]]))
        layer.bias.fill_(0.5)
    return head


HIDDEN = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # head outputs 1.5 and 2.5
RETURNS = torch.tensor([10.0, 20.0])


def test_value_loss_is_half_the_mse_in_return_units() -> None:
    head = linear_head(scale=10.0)
    predicted = head(HIDDEN)
    assert predicted.tolist() == [1.5, 2.5]  # V = 15 and 25 in return units
    loss = head.loss(predicted, RETURNS)
    # errors 15 - 10 = 5 and 25 - 20 = 5: 0.5 * (25 + 25) / 2 = 12.5 (returns / scale: 0.125)
    assert loss.item() == pytest.approx(12.5)
    loss.backward()
    # dL/db = mean(scale * (V - R)) = 10 * 5 = 50; dL/dw = mean(scale * (V - R) * h) = [25, 25]
    assert head.net[0].bias.grad.item() == pytest.approx(50.0)
    assert head.net[0].weight.grad.tolist() == [pytest.approx([25.0, 25.0])]


def test_the_scale_sets_output_units_not_the_loss() -> None:
    # the same values in return units (15, 25) from heads of scale 1 and 10: the same loss
    unscaled = linear_head(scale=1.0)
    with torch.no_grad():
        unscaled.net[0].weight.mul_(10.0)
        unscaled.net[0].bias.mul_(10.0)
    for head in (unscaled, linear_head(scale=10.0)):
        assert head.loss(head(HIDDEN), RETURNS).item() == pytest.approx(12.5)
    # Table 2's coefficient on top: the PPO loss carries 0.5 * 12.5
    assert 0.5 * linear_head(10.0).loss(linear_head(10.0)(HIDDEN), RETURNS).item() == 6.25

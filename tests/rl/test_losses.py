"""The PPO policy loss and its helpers against numbers worked by hand.

Minibatch used throughout: 2 turns padded to 3 response tokens, float64.
Turn 0, A = +2, ratios [1.5, 1.0, 0.5];  turn 1, A = -1, ratios [0.5, 1.5, (pad)].
Per token min(rho * A, clip(rho, 0.8, 1.28) * A) with eps_low 0.2, eps_high 0.28:
  turn 0: rho 1.5 -> min(3.0, 1.28 * 2 = 2.56) = 2.56   (clipped)
          rho 1.0 -> 2.0
          rho 0.5 -> min(1.0, 0.8 * 2 = 1.6)   = 1.0    (A > 0: no lower clip)
  turn 1: rho 0.5 -> min(-0.5, -0.8)           = -0.8   (clipped)
          rho 1.5 -> min(-1.5, -1.28)          = -1.5   (A < 0: no upper clip)
Sum 2.56 + 2 + 1 - 0.8 - 1.5 = 3.26 over 5 real tokens: loss = -0.652. Clip fraction 2/5.
approx KL = mean((rho - 1) - ln rho): rho 1.5 -> 0.5 - 0.4054651081 = 0.0945348919,
rho 0.5 -> -0.5 + 0.6931471806 = 0.1931471806, rho 1 -> 0; two of each non-1 ratio:
(2 * 0.0945348919 + 2 * 0.1931471806) / 5 = 0.1150728290. Ratio mean 5 / 5 = 1, max 1.5.
"""

from __future__ import annotations

import math

import pytest
import torch

from odyssey_core.rl.losses import (
    actor_loss,
    broadcast_turn_advantages,
    combine_thought_action_logprobs,
    entropy_from_logits,
    kl_penalty_k3,
    pad_ragged,
    ppo_clip_loss,
    select_nonzero_advantage_turns,
)

LN = math.log
OLD = [torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64), torch.tensor([-1.0, -3.0])]
NEW = [
    OLD[0] + torch.tensor([LN(1.5), 0.0, LN(0.5)], dtype=torch.float64),
    OLD[1] + torch.tensor([LN(0.5), LN(1.5)], dtype=torch.float64),
]
TURN_ADVANTAGES = torch.tensor([2.0, -1.0], dtype=torch.float64)


def minibatch(pad_new: float = 0.0):
    old, mask = pad_ragged(OLD, 0.0)
    new, _ = pad_ragged(NEW, pad_new)
    new = new.clone().requires_grad_(True)
    return new, old, broadcast_turn_advantages(TURN_ADVANTAGES, mask), mask


def test_pad_ragged_and_broadcast() -> None:
    padded, mask = pad_ragged([torch.tensor([1, 2, 3]), torch.tensor([4])], pad_value=-1)
    assert padded.tolist() == [[1, 2, 3], [4, -1, -1]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    advantages = broadcast_turn_advantages(torch.tensor([2.0, -1.0]), mask)
    assert advantages.tolist() == [[2.0, 2.0, 2.0], [-1.0, 0.0, 0.0]]


def test_ppo_clip_loss_hand_computed() -> None:
    new, old, advantages, mask = minibatch()
    loss, metrics = ppo_clip_loss(new, old, advantages, mask, eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(-0.652, abs=1e-6)
    assert metrics["actor/clip_frac"] == pytest.approx(0.4, abs=1e-9)
    assert metrics["actor/approx_kl"] == pytest.approx(0.1150728290, abs=1e-6)
    assert metrics["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["actor/ratio_max"] == pytest.approx(1.5, abs=1e-9)


def test_padding_does_not_count_even_when_it_is_huge() -> None:
    # A padded log-prob of 1000 would make exp() overflow if it reached the ratio.
    new, old, advantages, mask = minibatch(pad_new=1000.0)
    loss, metrics = ppo_clip_loss(new, old, advantages, mask)
    assert loss.item() == pytest.approx(-0.652, abs=1e-6)
    assert metrics["actor/ratio_max"] == pytest.approx(1.5, abs=1e-9)


def test_gradient_is_zero_on_clipped_tokens() -> None:
    # d loss / d log pi_new = -rho * A / 5 on unclipped tokens, 0 on clipped ones and padding:
    # turn 0: [0 (clipped), -1 * 2 / 5 = -0.4, -0.5 * 2 / 5 = -0.2];
    # turn 1: [0 (clipped), -1.5 * -1 / 5 = 0.3, 0 (pad)].
    new, old, advantages, mask = minibatch()
    loss, _ = ppo_clip_loss(new, old, advantages, mask)
    loss.backward()
    assert new.grad.flatten().tolist() == pytest.approx([0.0, -0.4, -0.2, 0.0, 0.3, 0.0], abs=1e-9)


def test_clip_is_asymmetric() -> None:
    new, old, advantages, mask = minibatch()
    # Symmetric 0.2: the rho 1.5, A = +2 token is cut at 1.2 -> 2.4; sum 3.1; loss -0.62.
    loss, _ = ppo_clip_loss(new, old, advantages, mask, eps_low=0.2, eps_high=0.2)
    assert loss.item() == pytest.approx(-0.62, abs=1e-6)
    # eps_low 0.3: the rho 0.5, A = -1 token is cut at 0.7 -> -0.7; sum 3.36; loss -0.672.
    loss, _ = ppo_clip_loss(new, old, advantages, mask, eps_low=0.3, eps_high=0.28)
    assert loss.item() == pytest.approx(-0.672, abs=1e-6)


def test_kl_penalty_k3() -> None:
    # d = ref - new: ln 2 -> 2 - ln 2 - 1 = 0.3068528194; 0 -> 0; the padded token is ignored.
    new = torch.tensor([[0.0, 0.0, 5.0]], dtype=torch.float64)
    ref = torch.tensor([[LN(2.0), 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    assert float(kl_penalty_k3(new, ref, mask)) == pytest.approx(0.3068528194 / 2, abs=1e-9)


def test_entropy_from_uniform_logits() -> None:
    logits = torch.zeros(2, 3, 4)
    logits[1, 2] = torch.tensor([100.0, 0.0, 0.0, 0.0])  # padded and near-deterministic
    mask = torch.tensor([[True, True, True], [True, True, False]])
    assert float(entropy_from_logits(logits, mask)) == pytest.approx(math.log(4), abs=1e-6)


def test_actor_loss_extras_are_off_by_default_and_add_up() -> None:
    new, old, advantages, mask = minibatch()
    base, _ = actor_loss(new, old, advantages, mask)
    assert base.item() == pytest.approx(-0.652, abs=1e-6)
    ref = old.clone()  # ref - new = -ln rho, so k3 = 1/rho - 1 + ln rho on each token
    k3 = sum(1 / r - 1 + LN(r) for r in [1.5, 1.0, 0.5, 0.5, 1.5]) / 5
    logits = torch.zeros(2, 3, 4, dtype=torch.float64)  # entropy ln 4
    total, metrics = actor_loss(
        new, old, advantages, mask, ref_logprobs=ref, kl_coef=0.1, logits=logits,
        entropy_coef=0.01,
    )  # fmt: skip
    assert total.item() == pytest.approx(-0.652 + 0.1 * k3 - 0.01 * math.log(4), abs=1e-6)
    assert metrics["actor/kl_ref"] == pytest.approx(k3, abs=1e-6)
    with pytest.raises(ValueError, match="logits"):
        actor_loss(new, old, advantages, mask, entropy_coef=0.01)
    with pytest.raises(ValueError, match="reference"):
        actor_loss(new, old, advantages, mask, kl_coef=0.1)


def test_combine_thought_action_logprobs() -> None:
    # turn 0: thought tokens -1, -2; action token -0.5; lambda 0.5 -> 0.5 * -3 - 0.5 = -2.0
    # turn 1: thought -4; action -1, -1 (last token is padding: -inf, in no mask) -> -2 - 2 = -4
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-4.0, -1.0, -1.0]])
    logprobs = torch.cat([logprobs, torch.tensor([[-0.1], [float("-inf")]])], dim=1)
    thought = torch.tensor([[True, True, False, False], [True, False, False, False]])
    action = torch.tensor([[False, False, True, False], [False, True, True, False]])
    combined = combine_thought_action_logprobs(logprobs, thought, action, thought_weight=0.5)
    assert combined.tolist() == pytest.approx([-2.0, -4.0])
    plain = combine_thought_action_logprobs(logprobs, thought, action, thought_weight=1.0)
    assert plain.tolist() == pytest.approx([-3.5, -6.0])


def test_select_nonzero_advantage_turns() -> None:
    advantages = torch.tensor([0.0, 1.2, 0.0, 1e-12, -0.3])
    assert select_nonzero_advantage_turns(advantages).tolist() == [1, 3, 4]
    assert select_nonzero_advantage_turns(torch.zeros(3)).tolist() == []


def test_skipping_zero_advantage_turns_keeps_the_gradient_direction() -> None:
    # A zero-advantage turn adds nothing to the summed surrogate; only the token count differs.
    new, old, _, mask = minibatch()
    advantages = broadcast_turn_advantages(torch.tensor([2.0, 0.0], dtype=torch.float64), mask)
    loss_all, _ = ppo_clip_loss(new, old, advantages, mask)
    keep = select_nonzero_advantage_turns(torch.tensor([2.0, 0.0]))
    loss_kept, _ = ppo_clip_loss(new[keep], old[keep], advantages[keep], mask[keep])
    # all: (2.56 + 2 + 1) / 5;  kept: (2.56 + 2 + 1) / 3
    assert loss_all.item() == pytest.approx(-5.56 / 5, abs=1e-6)
    assert loss_kept.item() == pytest.approx(-5.56 / 3, abs=1e-6)

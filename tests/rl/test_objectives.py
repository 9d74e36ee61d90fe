"""The policy objectives: token- and turn-level PPO against hand computations, and the exact
entropy they use for a bonus (checked against the full next-token distribution)."""

from __future__ import annotations

import math

import model_fixtures
import pytest
import torch

from odyssey_core.rl.objectives import OBJECTIVES, ObjectiveSettings, ScoredTurns

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy


def _scored(new, old, advantages, thought, action, entropies=None) -> ScoredTurns:
    return ScoredTurns(
        new_logprobs=[torch.tensor(x, requires_grad=True) for x in new],
        old_logprobs=[torch.tensor(x) for x in old],
        advantages=torch.tensor(advantages),
        thought_mask=[torch.tensor(m) for m in thought],
        action_mask=[torch.tensor(m) for m in action],
        entropies=None if entropies is None else [torch.tensor(e) for e in entropies],
    )


def test_registry_and_units() -> None:
    assert set(OBJECTIVES.names()) == {"token_ppo", "turn_ppo"}
    assert OBJECTIVES.get("token_ppo").units([3, 2]) == 5
    assert OBJECTIVES.get("turn_ppo").units([3, 2]) == 2


def test_turn_ppo_is_gtr_eq_2_with_a_symmetric_clip() -> None:
    # turn 0: thought [-1, -2] (lambda 0.5), action [-0.5]: new = 0.5 * -3 - 0.5 = -2.0;
    #         old = 0.5 * -3.4 - 0.7 = -2.4 -> rho = e^0.4 = 1.49 > 1.1: clipped for A > 0
    # turn 1: new = 0.5 * -1 - 1 = -1.5, old = -1.5 -> rho = 1
    scored = _scored(
        new=[[-1.0, -2.0, -0.5], [-1.0, -1.0]],
        old=[[-1.2, -2.2, -0.7], [-1.0, -1.0]],
        advantages=[2.0, -1.0],
        thought=[[True, True, False], [True, False]],
        action=[[False, False, True], [False, True]],
    )
    settings = ObjectiveSettings(eps_low=0.1, eps_high=0.1, thought_weight=0.5)
    loss, metrics = OBJECTIVES.get("turn_ppo").fn(scored, settings)
    expected = -(min(math.exp(0.4) * 2.0, 1.1 * 2.0) + (-1.0)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["actor/clip_frac"] == pytest.approx(0.5)
    loss.backward()  # the clipped turn gives no gradient; the other one does
    assert torch.count_nonzero(scored.new_logprobs[0].grad) == 0
    assert scored.new_logprobs[1].grad.tolist() == pytest.approx([-0.5 * 0.5 * -1, -0.5 * -1])


def test_entropy_bonus_uses_the_given_exact_entropies_and_refuses_without_them() -> None:
    args = dict(
        new=[[-1.0, -2.0]], old=[[-1.0, -2.0]], advantages=[0.0],
        thought=[[True, False]], action=[[False, True]],
    )  # fmt: skip
    settings = ObjectiveSettings(eps_low=0.1, eps_high=0.1, entropy_coef=0.01)
    for name in ("turn_ppo", "token_ppo"):
        with pytest.raises(ValueError, match="entrop"):
            OBJECTIVES.get(name).fn(_scored(**args), settings)
        loss, metrics = OBJECTIVES.get(name).fn(_scored(**args, entropies=[[2.0, 4.0]]), settings)
        assert metrics["actor/entropy"] == pytest.approx(3.0)  # token mean of the entropies
        assert loss.item() == pytest.approx(-0.01 * 3.0)  # A = 0: only the bonus is left


def test_score_returns_the_exact_entropy_of_the_next_token_distribution(tiny_policy) -> None:
    """H at a response's first token equals -sum_v p_v log p_v over the whole vocabulary, each
    p_v scored as a one-token response; and it carries a gradient."""
    obs = model_fixtures.make_observations(["task"])[0]
    inputs, _ = tiny_policy.encode([obs])
    prompt = inputs["input_ids"][0].tolist()
    vocab = tiny_policy.model.config.get_text_config().vocab_size
    # The image placeholder cannot stand in a response (it would ask for image features): its
    # probability is what the rest of the vocabulary leaves.
    image_token = tiny_policy.model.config.image_token_id
    ids = [v for v in range(vocab) if v != image_token]
    with torch.no_grad():
        every = tiny_policy.score(
            [prompt] * len(ids), [[v] for v in ids], [obs.image] * len(ids), 1.0, 256
        )
    log_p = torch.stack([x[0] for x in every]).double()
    p_image = 1.0 - float(log_p.exp().sum())
    assert -1e-5 < p_image < 1.0
    by_hand = float(-(log_p.exp() * log_p).sum())
    if p_image > 0:
        by_hand -= p_image * math.log(p_image)
    entropies: list[torch.Tensor] = []
    params = [p for p in tiny_policy.model.parameters()]
    was = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(True)
    try:
        with torch.enable_grad():
            tiny_policy.score([prompt], [[5, 9]], [obs.image], 1.0, 1, entropies=entropies)
            assert entropies[0].shape == (2,)
            assert float(entropies[0][0].detach()) == pytest.approx(by_hand, rel=1e-4)
            entropies[0].sum().backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    finally:
        for p, flag in zip(params, was, strict=True):
            p.requires_grad_(flag)
            p.grad = None


def dual_clip_example() -> ScoredTurns:
    """Turn 0: A = -1 on four tokens with ratios 0.5, 1.1, 2 and 4; turn 1: A = +1 on one token
    with ratio 4 (old log-probs 0, new log-probs log rho)."""
    ratios = [[0.5, 1.1, 2.0, 4.0], [4.0]]
    return _scored(
        [[math.log(r) for r in turn] for turn in ratios],
        [[0.0] * len(turn) for turn in ratios],
        [-1.0, 1.0],
        [[True] * len(turn) for turn in ratios],
        [[False] * len(turn) for turn in ratios],
    )


def test_token_ppo_dual_clip_against_hand_computed_numbers() -> None:
    """eps 0.2 / 0.3, c = 3. Per token, min(rho A, clip(rho) A): -0.8, -1.1, -2, -4 and 1.3;
    dual clip lifts the A < 0 token at rho 4 to c A = -3 (the others are above -3), so the
    token mean is -6.6 / 5 without it and -5.6 / 5 with it. Gradients, d L / d log pi_new:
    -(rho A) / 5 where the unclipped branch is live (1.1: 0.22, 2: 0.4, and 4: 0.8 without the
    dual clip), 0 where a clip holds (0.5 at 0.8 A, 4 at c A, the positive token at 1.3 A)."""
    token_ppo = OBJECTIVES.get("token_ppo").fn
    plain = dual_clip_example()
    loss, metrics = token_ppo(plain, ObjectiveSettings(eps_low=0.2, eps_high=0.3))
    loss.backward()
    assert loss.item() == pytest.approx(6.6 / 5, abs=1e-6)
    assert "actor/dual_clip_frac" not in metrics
    assert plain.new_logprobs[0].grad.tolist() == pytest.approx([0.0, 0.22, 0.4, 0.8], abs=1e-6)
    assert plain.new_logprobs[1].grad.tolist() == pytest.approx([0.0], abs=1e-6)

    dual = dual_clip_example()
    settings = ObjectiveSettings(eps_low=0.2, eps_high=0.3, dual_clip=3.0)
    loss, metrics = token_ppo(dual, settings)
    loss.backward()
    assert loss.item() == pytest.approx(5.6 / 5, abs=1e-6)
    assert metrics["actor/pg_loss"] == pytest.approx(5.6 / 5, abs=1e-6)
    assert metrics["actor/dual_clip_frac"] == pytest.approx(1 / 5)
    assert metrics["actor/clip_frac"] == pytest.approx(2 / 5)  # rho 0.5 and the positive token
    assert dual.new_logprobs[0].grad.tolist() == pytest.approx([0.0, 0.22, 0.4, 0.0], abs=1e-6)
    assert dual.new_logprobs[1].grad.tolist() == pytest.approx([0.0], abs=1e-6)


def test_dual_clip_is_off_by_default_and_needs_c_above_one() -> None:
    assert ObjectiveSettings().dual_clip is None
    for c in (1.0, 0.5):
        with pytest.raises(ValueError, match="dual_clip must be above 1"):
            ObjectiveSettings(dual_clip=c)

"""The seven advantage estimators against values worked by hand from Appendix C.1.

Batch used throughout: two episodes, rewards [1, 0, 2 | 3, 1], gamma 0.5.
Discounted returns-to-go: episode 0: R2 = 2, R1 = 0 + 0.5 * 2 = 1, R0 = 1 + 0.5 * 1 = 1.5;
episode 1: R4 = 1, R3 = 3 + 0.5 * 1 = 3.5.  So R = [1.5, 1, 2, 3.5, 1].
"""

from __future__ import annotations

import math

import pytest
import torch

from odyssey_core.rl.advantages import ESTIMATORS, compute_advantages

REWARDS = torch.tensor([1.0, 0.0, 2.0, 3.0, 1.0], dtype=torch.float64)
EPISODES = torch.tensor([0, 0, 0, 1, 1])
VALUES = torch.ones(5, dtype=torch.float64)
GAMMA = 0.5
RETURNS = [1.5, 1.0, 2.0, 3.5, 1.0]


def close(actual: torch.Tensor, expected: list[float]) -> None:
    assert actual.tolist() == pytest.approx(expected, abs=1e-7)


def run(name: str, values=VALUES):
    return compute_advantages(name, REWARDS, values, EPISODES, GAMMA)


def test_registry_has_exactly_the_seven_estimators() -> None:
    assert set(ESTIMATORS.names()) == {
        "ppo_critic",
        "ppo_critic_pos",
        "grpo_outcome",
        "grpo_outcome_pos",
        "grpo_process",
        "grpo_process_pos",
        "reinforce_pp",
    }


@pytest.mark.parametrize("name", ["ppo_critic", "grpo_outcome", "grpo_process", "reinforce_pp"])
def test_returns_are_the_discounted_return_to_go(name: str) -> None:
    _, returns = run(name)
    close(returns, RETURNS)


def test_ppo_critic() -> None:
    # A~ = R - V = [0.5, 0, 1, 2.5, 0]; mean 0.8; squared deviations sum to 4.3; sigma = sqrt(0.86)
    advantages, _ = run("ppo_critic")
    close(advantages, [x / math.sqrt(0.86) for x in [0.5, 0.0, 1.0, 2.5, 0.0]])


def test_ppo_critic_pos_normalises_over_the_positive_part_only() -> None:
    # positive A~ = {0.5, 1, 2.5}: mean 4/3, variance (0.6944 + 0.1111 + 1.3611) / 3 = 13/18
    advantages, _ = run("ppo_critic_pos")
    sigma = math.sqrt(13 / 18)
    close(advantages, [0.5 / sigma, 0.0, 1.0 / sigma, 2.5 / sigma, 0.0])


def test_ppo_critic_pos_all_zero_when_nothing_is_positive() -> None:
    advantages, _ = run("ppo_critic_pos", values=torch.full((5,), 10.0, dtype=torch.float64))
    close(advantages, [0.0] * 5)


def test_grpo_outcome_counts_each_trajectory_once() -> None:
    # outcomes 3 and 4: mean 3.5, sigma 0.5 (a per-turn mean would be 3.4 instead)
    advantages, _ = run("grpo_outcome")
    close(advantages, [-1.0, -1.0, -1.0, 1.0, 1.0])
    positive, _ = run("grpo_outcome_pos")
    close(positive, [0.0, 0.0, 0.0, 1.0, 1.0])


def test_grpo_process() -> None:
    # mean r = 1.4, deviations [-0.4, -1.4, 0.6, 1.6, -0.4], variance 1.04;
    # undiscounted sums of the deviations inside episodes: [-1.2, -0.8, 0.6 | 1.2, -0.4]
    advantages, _ = run("grpo_process")
    sigma = math.sqrt(1.04)
    close(advantages, [x / sigma for x in [-1.2, -0.8, 0.6, 1.2, -0.4]])
    positive, _ = run("grpo_process_pos")
    close(positive, [0.0, 0.0, 0.6 / sigma, 1.2 / sigma, 0.0])


def test_reinforce_pp() -> None:
    # R mean 1.8, deviations [-0.3, -0.8, 0.2, 1.7, -0.8], variance 0.86
    advantages, _ = run("reinforce_pp")
    close(advantages, [x / math.sqrt(0.86) for x in [-0.3, -0.8, 0.2, 1.7, -0.8]])


def test_critic_free_estimators_ignore_values() -> None:
    for name in ["grpo_outcome", "grpo_process", "reinforce_pp"]:
        with_values, _ = run(name)
        without, _ = run(name, values=None)
        assert torch.equal(with_values, without)


def test_constant_batches_give_zeros_not_nans() -> None:
    rewards = torch.ones(4)
    episodes = torch.tensor([0, 0, 1, 1])
    for name in ["grpo_outcome", "grpo_process", "reinforce_pp"]:
        advantages, _ = compute_advantages(name, rewards, None, episodes, 0.9)
        assert torch.isfinite(advantages).all()
    advantages, _ = compute_advantages("grpo_outcome", rewards, None, episodes, 0.9)
    close(advantages, [0.0] * 4)


def test_bad_batches_are_refused() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        compute_advantages("reinforce_pp", REWARDS, None, torch.tensor([0, 1, 0, 1, 1]), 0.5)
    with pytest.raises(ValueError, match="values"):
        run("ppo_critic", values=None)
    with pytest.raises(KeyError, match="unknown advantage estimator 'gae'"):
        compute_advantages("gae", REWARDS, VALUES, EPISODES, GAMMA)

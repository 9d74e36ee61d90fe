"""The advantage estimators against values worked by hand: the seven of Appendix C.1, GAE.

Batch used throughout: two episodes, rewards [1, 0, 2 | 3, 1], gamma 0.5.
Discounted returns-to-go: episode 0: R2 = 2, R1 = 0 + 0.5 * 2 = 1, R0 = 1 + 0.5 * 1 = 1.5;
episode 1: R4 = 1, R3 = 3 + 0.5 * 1 = 3.5.  So R = [1.5, 1, 2, 3.5, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

import odyssey_core.recipes.espo.advantages  # noqa: F401  (registers espo, grpo_step)
from odyssey_core.recipes.odysseus.settings import ODYSSEUS_ESTIMATORS
from odyssey_core.rl.advantages import ESTIMATORS, AdvantageSettings, compute_advantages

REWARDS = torch.tensor([1.0, 0.0, 2.0, 3.0, 1.0], dtype=torch.float64)
EPISODES = torch.tensor([0, 0, 0, 1, 1])
VALUES = torch.ones(5, dtype=torch.float64)
GAMMA = 0.5
RETURNS = [1.5, 1.0, 2.0, 3.5, 1.0]


def close(actual: torch.Tensor, expected: list[float]) -> None:
    assert actual.tolist() == pytest.approx(expected, abs=1e-7)


@dataclass
class Batch:
    """The columns an estimator reads (a TurnBatch has them all)."""

    rewards: torch.Tensor
    values: torch.Tensor | None
    episode_ids: torch.Tensor
    terminated: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    bootstrap_values: torch.Tensor | None = None
    group_id: torch.Tensor | None = None

    def __post_init__(self) -> None:
        last = torch.ones_like(self.episode_ids, dtype=torch.bool)
        last[:-1] = self.episode_ids[1:] != self.episode_ids[:-1]
        if self.terminated is None:
            self.terminated = last
        if self.truncated is None:
            self.truncated = torch.zeros_like(last)


def advantages_of(name, rewards, values, episodes, gamma):
    settings = AdvantageSettings(estimator=name, gamma=gamma)
    return compute_advantages(Batch(rewards, values, episodes), settings)


def run(name: str, values=VALUES):
    return advantages_of(name, REWARDS, values, EPISODES, GAMMA)


def test_registry_has_the_seven_estimators_and_gae_with_their_metadata() -> None:
    # the engine's own entries, plus the two the ESPO recipe registers when it is imported
    assert set(ESTIMATORS.names()) == {*ODYSSEUS_ESTIMATORS, "gae", "espo", "grpo_step"}
    assert len(ODYSSEUS_ESTIMATORS) == 7
    needs = {name for name in ESTIMATORS.names() if ESTIMATORS.get(name).needs_values}
    assert needs == {"ppo_critic", "ppo_critic_pos", "gae"}
    assert [n for n in ESTIMATORS.names() if ESTIMATORS.get(n).bootstraps] == ["gae"]
    assert {n for n in ESTIMATORS.names() if ESTIMATORS.get(n).grouped} == {"espo", "grpo_step"}


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


def _values_for(raw: list[float]) -> torch.Tensor:
    """Critic values that make A~ = R - V equal ``raw`` on the batch above."""
    return torch.tensor(RETURNS, dtype=torch.float64) - torch.tensor(raw, dtype=torch.float64)


def test_ppo_critic_pos_falls_back_when_the_positives_have_no_spread() -> None:
    # One positive A~ (2): no sigma of positives. Fallback: sigma of all A~ = [-1,-1,-1,2,-1]:
    # mean -0.4, squared deviations 4 * 0.36 + 5.76 = 7.2, / 5 = 1.44 -> sigma 1.2.
    advantages, _ = run("ppo_critic_pos", values=_values_for([-1, -1, -1, 2, -1]))
    close(advantages, [0.0, 0.0, 0.0, 2 / 1.2, 0.0])
    # All positives equal (0.5): sigma of A~ = [0.5, -1, 0.5, 0.5, -2]: mean -0.3,
    # squared deviations 0.64 * 3 + 0.49 + 2.89 = 5.3, / 5 = 1.06.
    advantages, _ = run("ppo_critic_pos", values=_values_for([0.5, -1, 0.5, 0.5, -2]))
    s = math.sqrt(1.06)
    close(advantages, [0.5 / s, 0.0, 0.5 / s, 0.5 / s, 0.0])
    # No spread anywhere (every A~ = 0.5): the positives are left unscaled, not x1e8.
    advantages, _ = run("ppo_critic_pos", values=_values_for([0.5] * 5))
    close(advantages, [0.5] * 5)


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
        advantages, _ = advantages_of(name, rewards, None, episodes, 0.9)
        assert torch.isfinite(advantages).all()
    advantages, _ = advantages_of("grpo_outcome", rewards, None, episodes, 0.9)
    close(advantages, [0.0] * 4)


def test_bad_batches_are_refused() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        advantages_of("reinforce_pp", REWARDS, None, torch.tensor([0, 1, 0, 1, 1]), 0.5)
    with pytest.raises(ValueError, match="values"):
        run("ppo_critic", values=None)
    with pytest.raises(ValueError, match="values"):
        run("gae", values=None)
    with pytest.raises(ValueError, match="unknown estimator 'gaee'"):
        run("gaee")


# -- GAE ------------------------------------------------------------------------------------------


def test_gae_matches_a_hand_computation() -> None:
    # Two episodes: [0, 1, 2] terminated, then [3] truncated (bootstraps from V(o_4) = 0.7).
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5])
    values = torch.tensor([0.5, 0.2, 0.1, 0.3])
    batch = Batch(
        rewards,
        values,
        torch.tensor([0, 0, 0, 1]),
        terminated=torch.tensor([False, False, True, False]),
        truncated=torch.tensor([False, False, False, True]),
        bootstrap_values=torch.tensor([0.0, 0.0, 0.0, 0.7]),
    )
    g, lam = 0.9, 0.95
    adv, ret = compute_advantages(
        batch, AdvantageSettings(estimator="gae", gamma=g, gae_lambda=lam)
    )
    d3 = 0.5 + g * 0.7 - 0.3  # truncated: bootstraps from V(o_{t+1})
    d2 = 2.0 - 0.1  # terminated: no bootstrap, and no carry from the next episode
    d1 = 0.0 + g * 0.1 - 0.2
    d0 = 1.0 + g * 0.2 - 0.5
    expected = [d0 + g * lam * (d1 + g * lam * d2), d1 + g * lam * d2, d2, d3]
    assert adv.tolist() == pytest.approx(expected, rel=1e-5)
    assert torch.allclose(ret, adv + values)
    normalised, _ = compute_advantages(
        batch, AdvantageSettings(estimator="gae", gamma=g, gae_lambda=lam, normalize=True)
    )
    raw = torch.tensor(expected)
    assert normalised.tolist() == pytest.approx(((raw - raw.mean()) / raw.std()).tolist(), rel=1e-4)


def test_gae_refuses_truncations_without_bootstrap_values_and_unflagged_ends() -> None:
    batch = Batch(
        REWARDS,
        VALUES,
        EPISODES,
        truncated=torch.tensor([False, False, True, False, False]),
        terminated=torch.tensor([False, False, False, False, True]),
    )
    with pytest.raises(ValueError, match="bootstrap_values"):
        compute_advantages(batch, AdvantageSettings(estimator="gae", gamma=GAMMA))
    unflagged = Batch(REWARDS, VALUES, EPISODES, terminated=torch.zeros(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="terminated or truncated"):
        compute_advantages(unflagged, AdvantageSettings(estimator="gae", gamma=GAMMA))

"""Turn-level advantage estimators (Odysseus paper, Appendix C.1), one screen per idea.

Every estimator has the signature ``fn(rewards, values, episode_ids, gamma) -> (advantages,
returns)`` over N turns: 1-D float tensors, ``episode_ids`` long, the turns of an episode
contiguous and in time order, ``values`` None where the estimator needs none.

Shared conventions:
- ``returns`` is always the discounted return-to-go R_t = sum_{i>=t} gamma^(i-t) r_i inside
  the episode, with no bootstrap after its last turn.
- sigma is the population standard deviation (no Bessel correction) and every division is by
  (sigma + EPS), so a constant batch gives zeros, not NaNs.
- "Over the batch" means over all N turns unless a docstring says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from odyssey_core.common.registry import Registry

EPS = 1e-8

Estimator = Callable[
    [torch.Tensor, torch.Tensor | None, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]
]
ESTIMATORS: Registry[Estimator] = Registry("advantage estimator")


# -- building blocks ---------------------------------------------------------------------------


def _check(rewards: torch.Tensor, episode_ids: torch.Tensor) -> None:
    if rewards.ndim != 1 or episode_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and episode_ids must be 1-D of equal length, got {tuple(rewards.shape)} "
            f"and {tuple(episode_ids.shape)}"
        )
    starts = torch.ones_like(episode_ids, dtype=torch.bool)
    starts[1:] = episode_ids[1:] != episode_ids[:-1]
    if torch.unique(episode_ids).numel() != int(starts.sum()):
        raise ValueError("the turns of each episode must be contiguous in the batch")


def population_std(x: torch.Tensor) -> torch.Tensor:
    return x.std(correction=0) if x.numel() > 0 else x.new_zeros(())


def discounted_return_to_go(
    rewards: torch.Tensor, episode_ids: torch.Tensor, gamma: float
) -> torch.Tensor:
    """R_t = r_t + gamma * R_{t+1} inside the episode; R = r at each episode's last turn."""
    returns = torch.empty_like(rewards)
    running = rewards.new_zeros(())
    for t in range(rewards.numel() - 1, -1, -1):
        episode_continues = t + 1 < rewards.numel() and episode_ids[t + 1] == episode_ids[t]
        running = rewards[t] + (gamma * running if episode_continues else 0.0)
        returns[t] = running
    return returns


def episode_sums(rewards: torch.Tensor, episode_ids: torch.Tensor) -> torch.Tensor:
    """Per-turn total of the turn's episode (the same number on every turn of an episode)."""
    _, inverse = torch.unique_consecutive(episode_ids, return_inverse=True)
    totals = torch.zeros(int(inverse.max()) + 1 if inverse.numel() else 0, dtype=rewards.dtype)
    totals.index_add_(0, inverse, rewards)
    return totals[inverse]


def _standardize(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (population_std(x) + EPS)


# -- the seven estimators -----------------------------------------------------------------------


@ESTIMATORS.register("ppo_critic")
def ppo_critic(rewards, values, episode_ids, gamma):
    """A~_t = R_t - V(o_t);  A_t = A~_t / sigma(A~ over the batch)."""
    _check(rewards, episode_ids)
    if values is None:
        raise ValueError("ppo_critic needs the critic's values")
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    raw = returns - values
    return raw / (population_std(raw) + EPS), returns


@ESTIMATORS.register("ppo_critic_pos")
def ppo_critic_pos(rewards, values, episode_ids, gamma):
    """Positive-advantage filtering (eq. 1): A_t = max(A~_t, 0) / sigma({A~ : A~ > 0})."""
    _check(rewards, episode_ids)
    if values is None:
        raise ValueError("ppo_critic_pos needs the critic's values")
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    raw = returns - values
    positive = raw[raw > 0]
    if positive.numel() == 0:  # nothing beat the critic: no turn is reinforced
        return torch.zeros_like(raw), returns
    return raw.clamp(min=0) / (population_std(positive) + EPS), returns


@ESTIMATORS.register("grpo_outcome")
def grpo_outcome(rewards, values, episode_ids, gamma):
    """Every turn gets its trajectory's undiscounted total R_out (eq. 2), standardised over the
    trajectories of the batch, each trajectory counted once (eq. 3)."""
    _check(rewards, episode_ids)
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    _, inverse = torch.unique_consecutive(episode_ids, return_inverse=True)
    per_turn_outcome = episode_sums(rewards, episode_ids)
    first_turn = torch.ones_like(inverse, dtype=torch.bool)
    first_turn[1:] = inverse[1:] != inverse[:-1]
    outcomes = per_turn_outcome[first_turn]  # one number per trajectory
    mean, sigma = outcomes.mean(), population_std(outcomes)
    return (per_turn_outcome - mean) / (sigma + EPS), returns


@ESTIMATORS.register("grpo_outcome_pos")
def grpo_outcome_pos(rewards, values, episode_ids, gamma):
    """max(0, grpo_outcome)."""
    advantages, returns = grpo_outcome(rewards, values, episode_ids, gamma)
    return advantages.clamp(min=0), returns


@ESTIMATORS.register("grpo_process")
def grpo_process(rewards, values, episode_ids, gamma):
    """r~_t = (r_t - mean r) / sigma(r) over all turns; A_t = sum_{i>=t} r~_i (undiscounted)."""
    _check(rewards, episode_ids)
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    return discounted_return_to_go(_standardize(rewards), episode_ids, 1.0), returns


@ESTIMATORS.register("grpo_process_pos")
def grpo_process_pos(rewards, values, episode_ids, gamma):
    """max(0, grpo_process)."""
    advantages, returns = grpo_process(rewards, values, episode_ids, gamma)
    return advantages.clamp(min=0), returns


@ESTIMATORS.register("reinforce_pp")
def reinforce_pp(rewards, values, episode_ids, gamma):
    """Turn-level Reinforce++: A_t = (R_t - mean R) / sigma(R) over all turns."""
    _check(rewards, episode_ids)
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    return _standardize(returns), returns


def compute_advantages(
    name: str,
    rewards: torch.Tensor,
    values: torch.Tensor | None,
    episode_ids: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Look up ``name`` in :data:`ESTIMATORS` and apply it."""
    return ESTIMATORS.get(name)(rewards, values, episode_ids, gamma)

"""Advantage estimators, one screen per idea: the seven turn-level estimators of the Odysseus
paper (Appendix C.1) and GAE (GTR, after RL4VLM's PPO).

Every registered estimator has one signature over the batch, ``fn(batch, settings) ->
(advantages, returns)``: ``batch`` is a :class:`~odyssey_core.rollout.batch.TurnBatch` (or any
:class:`AdvantageInputs`): 1-D float ``rewards``, long ``episode_ids`` with the turns of an
episode contiguous and in time order, ``values`` where the entry needs them; ``settings`` is
the preset's ``advantage:`` section, an :class:`AdvantageSettings`. Each :class:`Estimator`
entry carries its own metadata: whether it reads V(o_t) (``needs_values``), whether it
compares episodes within groups (``grouped``, which reads ``batch.group_id``) and which
:class:`AdvantageSettings` subclass it reads (``settings``: ESPO's adds its gates' knobs).

Shared conventions of the Odysseus estimators:
- ``returns`` is the discounted return-to-go R_t = sum_{i>=t} gamma^(i-t) r_i inside the
  episode, with no bootstrap after its last turn.
- sigma is the population standard deviation (no Bessel correction) and every division is by
  (sigma + EPS), so a constant batch gives zeros, not NaNs.
- "Over the batch" means over all N turns unless a docstring says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from pydantic import Field, model_validator

from odyssey_core.common.registry import Registry
from odyssey_core.config import StrictModel

EPS = 1e-8
NO_SPREAD = 1e-6  # a spread below this share of the largest |value| counts as none


class AdvantageInputs(Protocol):
    """What an estimator reads from the batch (a TurnBatch has all of it)."""

    rewards: torch.Tensor
    values: torch.Tensor | None
    episode_ids: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    bootstrap_values: torch.Tensor | None
    group_id: torch.Tensor | None


class AdvantageSettings(StrictModel):
    """A training preset's ``advantage:`` section: the estimator, by name, and what it reads.
    Each recipe subclasses it for its own defaults; an estimator with knobs of its own reads a
    subclass that adds them (its :class:`Estimator` entry names that class, and a section
    that lacks them is an error, never a silent default)."""

    estimator: str = Field(description="a name in ESTIMATORS")
    gamma: float = Field(ge=0, le=1, description="the discount")
    gae_lambda: float = Field(default=1.0, ge=0, le=1, description="GAE's lambda (gae only)")
    normalize: bool = Field(
        default=False, description="gae: standardise the advantages over the batch afterwards"
    )

    @model_validator(mode="after")
    def _estimator_reads_this_section(self) -> AdvantageSettings:
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"unknown estimator {self.estimator!r}; known: {', '.join(ESTIMATORS.names())}"
            )
        wanted = ESTIMATORS.get(self.estimator).settings
        if not isinstance(self, wanted):
            raise ValueError(
                f"estimator {self.estimator!r} reads {wanted.__name__}'s fields "
                f"({', '.join(sorted(set(wanted.model_fields) - set(type(self).model_fields)))}), "
                f"which this recipe's advantage section ({type(self).__name__}) does not have"
            )
        return self


EstimatorFn = Callable[[AdvantageInputs, AdvantageSettings], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Estimator:
    fn: EstimatorFn
    needs_values: bool  # reads V(o_t)
    grouped: bool = False  # compares the episodes of a group (reads group_id)
    bootstraps: bool = False  # reads V(o_{t+1}) after truncations (bootstrap_values)
    settings: type[AdvantageSettings] = AdvantageSettings  # the section class it reads

    def __call__(
        self, batch: AdvantageInputs, settings: AdvantageSettings
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.needs_values and batch.values is None:
            raise ValueError(f"{self.fn.__name__} needs the value function's values")
        if self.grouped and batch.group_id is None:
            raise ValueError(f"{self.fn.__name__} compares episodes in groups: set group_id")
        if not isinstance(settings, self.settings):
            raise TypeError(
                f"{self.fn.__name__} reads {self.settings.__name__}, got {type(settings).__name__}"
            )
        return self.fn(batch, settings)


ESTIMATORS: Registry[Estimator] = Registry("advantage estimator")


def estimator(
    name: str,
    *,
    needs_values: bool = False,
    grouped: bool = False,
    bootstraps: bool = False,
    settings: type[AdvantageSettings] = AdvantageSettings,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn(batch, settings)`` under ``name`` with its metadata; ``settings`` is the
    :class:`AdvantageSettings` subclass it reads."""

    def wrap(fn: EstimatorFn) -> EstimatorFn:
        ESTIMATORS.register(name, Estimator(fn, needs_values, grouped, bootstraps, settings))
        return fn

    return wrap


# -- building blocks ---------------------------------------------------------------------------


def check_episode_rows(
    rewards: torch.Tensor, episode_ids: torch.Tensor, unit: str = "episode"
) -> None:
    """The batch layout every estimator reads: 1-D ``rewards`` and ``episode_ids`` of one
    length, the turns of each ``unit`` (an episode; ESPO's pseudo-episode) contiguous."""
    if rewards.ndim != 1 or episode_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and episode_ids must be 1-D of equal length, got {tuple(rewards.shape)} "
            f"and {tuple(episode_ids.shape)}"
        )
    starts = torch.ones_like(episode_ids, dtype=torch.bool)
    starts[1:] = episode_ids[1:] != episode_ids[:-1]
    if torch.unique(episode_ids).numel() != int(starts.sum()):
        raise ValueError(f"the turns of each {unit} must be contiguous in the batch")


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


# -- the seven Odysseus estimators, as formulas over (rewards, values, episode_ids, gamma) -------


def ppo_critic(rewards, values, episode_ids, gamma):
    """A~_t = R_t - V(o_t);  A_t = A~_t / sigma(A~ over the batch)."""
    check_episode_rows(rewards, episode_ids)
    if values is None:
        raise ValueError("ppo_critic needs the critic's values")
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    raw = returns - values
    return raw / (population_std(raw) + EPS), returns


def ppo_critic_pos(rewards, values, episode_ids, gamma):
    """Positive-advantage filtering (eq. 1): A_t = max(A~_t, 0) / sigma({A~ : A~ > 0}).

    eq. 1 is undefined when the positive A~ have no spread (one positive turn, or all equal:
    an untrained critic on a sparse reward); dividing by ~EPS there would scale them ~1e8x.
    Fallback, in order: sigma over the whole batch's A~ (ppo_critic's normaliser), and when
    that has no spread either, no scaling. "No spread" is sigma <= NO_SPREAD * max |A~|.
    """
    check_episode_rows(rewards, episode_ids)
    if values is None:
        raise ValueError("ppo_critic_pos needs the critic's values")
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    raw = returns - values
    positive = raw[raw > 0]
    if positive.numel() == 0:  # nothing beat the critic: no turn is reinforced
        return torch.zeros_like(raw), returns
    floor = NO_SPREAD * float(raw.abs().max())
    sigma = population_std(positive)
    if positive.numel() < 2 or float(sigma) <= floor:
        sigma = population_std(raw)
        if float(sigma) <= floor:
            return raw.clamp(min=0), returns
    return raw.clamp(min=0) / (sigma + EPS), returns


def grpo_outcome(rewards, values, episode_ids, gamma):
    """Every turn gets its trajectory's undiscounted total R_out (eq. 2), standardised over the
    trajectories of the batch, each trajectory counted once (eq. 3)."""
    check_episode_rows(rewards, episode_ids)
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    _, inverse = torch.unique_consecutive(episode_ids, return_inverse=True)
    per_turn_outcome = episode_sums(rewards, episode_ids)
    first_turn = torch.ones_like(inverse, dtype=torch.bool)
    first_turn[1:] = inverse[1:] != inverse[:-1]
    outcomes = per_turn_outcome[first_turn]  # one number per trajectory
    mean, sigma = outcomes.mean(), population_std(outcomes)
    return (per_turn_outcome - mean) / (sigma + EPS), returns


def grpo_process(rewards, values, episode_ids, gamma):
    """r~_t = (r_t - mean r) / sigma(r) over all turns; A_t = sum_{i>=t} r~_i (undiscounted)."""
    check_episode_rows(rewards, episode_ids)
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    return discounted_return_to_go(_standardize(rewards), episode_ids, 1.0), returns


def _positive_part(formula):
    """The estimator max(0, ``formula``): its advantages with the negative ones set to 0."""

    def positive(rewards, values, episode_ids, gamma):
        advantages, returns = formula(rewards, values, episode_ids, gamma)
        return advantages.clamp(min=0), returns

    positive.__name__ = positive.__qualname__ = f"{formula.__name__}_pos"
    positive.__doc__ = f"max(0, {formula.__name__})."
    return positive


grpo_outcome_pos = _positive_part(grpo_outcome)
grpo_process_pos = _positive_part(grpo_process)


def reinforce_pp(rewards, values, episode_ids, gamma):
    """Turn-level Reinforce++: A_t = (R_t - mean R) / sigma(R) over all turns."""
    check_episode_rows(rewards, episode_ids)
    returns = discounted_return_to_go(rewards, episode_ids, gamma)
    return _standardize(returns), returns


def _turn_level(formula, needs_values: bool) -> EstimatorFn:
    def fn(batch: AdvantageInputs, settings: AdvantageSettings):
        values = batch.values if needs_values else None
        return formula(batch.rewards.float(), values, batch.episode_ids, settings.gamma)

    fn.__name__ = formula.__name__
    fn.__doc__ = formula.__doc__
    return fn


for _formula, _needs_values in (
    (ppo_critic, True),
    (ppo_critic_pos, True),
    (grpo_outcome, False),
    (grpo_outcome_pos, False),
    (grpo_process, False),
    (grpo_process_pos, False),
    (reinforce_pp, False),
):
    estimator(_formula.__name__, needs_values=_needs_values)(_turn_level(_formula, _needs_values))


# -- GAE -----------------------------------------------------------------------------------------


def next_values(batch: AdvantageInputs) -> torch.Tensor:
    """V(o_{t+1}) per turn: the next row's value inside an episode, ``bootstrap_values`` after a
    truncation, 0 after a termination (no future)."""
    values = batch.values
    assert values is not None
    ids = batch.episode_ids
    n = values.numel()
    following = torch.zeros_like(values)
    continues = torch.zeros(n, dtype=torch.bool)
    continues[:-1] = ids[1:] == ids[:-1]
    following[:-1] = torch.where(continues[:-1], values[1:], 0.0)
    ends = ~continues
    unflagged = ends & ~batch.terminated & ~batch.truncated
    if bool(unflagged.any()):
        raise ValueError("every episode's last turn must be terminated or truncated for GAE")
    cut = ends & batch.truncated
    if bool(cut.any()):
        if batch.bootstrap_values is None:
            raise ValueError("truncated episodes need bootstrap_values (V of the next observation)")
        following = torch.where(cut, batch.bootstrap_values.to(values.dtype), following)
    return following


@estimator("gae", needs_values=True, bootstraps=True)
def gae(batch: AdvantageInputs, settings: AdvantageSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """delta_t = r_t + gamma * V(o_{t+1}) * [not terminated] - V(o_t);
    A_t = delta_t + gamma * lambda * A_{t+1} inside the episode;  returns = A + V.

    V(o_{t+1}) after a truncation is ``bootstrap_values``. With ``normalize``, A is then
    standardised over the batch (Bessel-corrected std, as RL4VLM's PPO does); the returns are
    not.
    """
    rewards, values = batch.rewards.float(), batch.values
    assert values is not None
    check_episode_rows(rewards, batch.episode_ids)
    values = values.float()
    following = next_values(batch)
    delta = rewards + settings.gamma * following - values
    ids = batch.episode_ids
    advantages = torch.zeros_like(rewards)
    running = rewards.new_zeros(())
    for t in range(rewards.numel() - 1, -1, -1):
        continues = t + 1 < rewards.numel() and ids[t + 1] == ids[t]
        running = delta[t] + (settings.gamma * settings.gae_lambda * running if continues else 0.0)
        advantages[t] = running
    returns = advantages + values
    if settings.normalize and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + EPS)
    return advantages, returns


def compute_advantages(
    batch: AdvantageInputs, settings: AdvantageSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply the estimator ``settings.estimator`` names to ``batch``."""
    return ESTIMATORS.get(settings.estimator)(batch, settings)

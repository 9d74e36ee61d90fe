"""Policy objectives: what one micro-batch of scored turns contributes to the loss.

An objective sees a :class:`ScoredTurns` (the new log-probs with gradients, the old ones, the
turns' advantages and token masks) and returns ``(loss, metrics)``, where ``loss`` is the mean
over the objective's own **unit**: tokens for a token-level objective, turns for a turn-level
one. The trainer weights each micro-batch by its share of the minibatch's units, so the
accumulated gradient is exactly that of the minibatch's mean, whatever the micro-batch size.

- ``token_ppo`` (Odysseus, Appendix C.1): the clipped surrogate per response token with an
  asymmetric clip and token-mean aggregation (verl's ``token-mean``); dual-clip PPO's lower
  bound c * A on negative advantages as an option (``dual_clip``, off by default).
- ``turn_ppo`` (GTR eq. 2): one ratio per turn on
  log pi(a_t) = lambda * sum log pi(thought tokens) + sum log pi(action tokens),
  a symmetric clip, the mean over turns.

Either may add an entropy bonus; it is the exact entropy of the sampling distribution at
every response token (``ScoredTurns.entropies``), never an estimate from sampled log-probs,
whose gradient is zero in expectation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from odyssey_core.common.registry import Registry
from odyssey_core.rl.losses import (
    actor_loss,
    broadcast_turn_advantages,
    combine_thought_action_logprobs,
    masked_mean,
    pad_ragged,
    ppo_clip_loss,
)

__all__ = ["OBJECTIVES", "Objective", "ObjectiveSettings", "ScoredTurns"]


@dataclass(frozen=True)
class ObjectiveSettings:
    eps_low: float = 0.2  # clip below 1 - eps_low
    eps_high: float = 0.28  # clip above 1 + eps_high (turn_ppo: set both to its clip)
    thought_weight: float = 1.0  # turn_ppo's lambda on the thought tokens
    kl_coef: float = 0.0  # k3 KL to the reference policy (token_ppo)
    entropy_coef: float = 0.0  # exact-entropy bonus
    # token_ppo: dual-clip PPO's c (> 1): a token with A < 0 keeps at least c * A (None: off)
    dual_clip: float | None = None

    def __post_init__(self) -> None:
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(
                f"dual_clip must be above 1 (dual-clip PPO's c, e.g. 3), got {self.dual_clip}; "
                "null turns it off"
            )


@dataclass
class ScoredTurns:
    """One micro-batch: ragged per-turn tensors (response tokens), advantages per turn."""

    new_logprobs: list[torch.Tensor]  # with gradients
    old_logprobs: list[torch.Tensor]
    advantages: torch.Tensor  # [b]
    thought_mask: list[torch.Tensor]
    action_mask: list[torch.Tensor]
    entropies: list[torch.Tensor] | None = None  # exact per-token entropies, with gradients
    ref_logprobs: list[torch.Tensor] | None = None


ObjectiveFn = Callable[[ScoredTurns, ObjectiveSettings], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Objective:
    fn: ObjectiveFn
    unit: Literal["token", "turn"]  # what the loss is a mean over

    def units(self, response_lengths: list[int]) -> int:
        """How many units a micro-batch of turns with these response lengths holds."""
        return sum(response_lengths) if self.unit == "token" else len(response_lengths)


OBJECTIVES: Registry[Objective] = Registry("policy objective")


def _padded(scored: ScoredTurns) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(new [b, T], old [b, T], mask [b, T]) on the new log-probs' device."""
    new, mask = pad_ragged(scored.new_logprobs)
    old, _ = pad_ragged(scored.old_logprobs)
    return new, old.to(new.device), mask.to(new.device)


def token_ppo(scored: ScoredTurns, s: ObjectiveSettings) -> tuple[torch.Tensor, dict[str, float]]:
    """L = -token_mean(min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)) + kl - entropy
    bonus, rho per response token, A_t copied onto the turn's tokens; with ``dual_clip`` c, a
    token with A < 0 takes max(that surrogate, c A) (dual-clip PPO)."""
    new, old, mask = _padded(scored)
    advantages = broadcast_turn_advantages(scored.advantages.float().to(new.device), mask)
    ref = None if scored.ref_logprobs is None else pad_ragged(scored.ref_logprobs)[0]
    entropy = None if scored.entropies is None else pad_ragged(scored.entropies)[0]
    return actor_loss(
        new,
        old,
        advantages,
        mask,
        eps_low=s.eps_low,
        eps_high=s.eps_high,
        ref_logprobs=None if ref is None else ref.to(new.device),
        kl_coef=s.kl_coef,
        entropy_coef=s.entropy_coef,
        token_entropy=None if entropy is None else entropy.to(new.device),
        dual_clip=s.dual_clip,
    )


def turn_ppo(scored: ScoredTurns, s: ObjectiveSettings) -> tuple[torch.Tensor, dict[str, float]]:
    """GTR eq. 2: rho_t = exp(log pi_new(a_t) - log pi_old(a_t)) on the lambda-weighted turn
    log-prob; L = -mean_t min(rho A, clip(rho, 1 - eps, 1 + eps) A) - entropy_coef * H."""
    new, old, mask = _padded(scored)
    thought, _ = pad_ragged(scored.thought_mask, False)
    action, _ = pad_ragged(scored.action_mask, False)
    thought, action = thought.to(new.device), action.to(new.device)
    new_turn = combine_thought_action_logprobs(new, thought, action, s.thought_weight)
    old_turn = combine_thought_action_logprobs(old, thought, action, s.thought_weight)
    ones = torch.ones(len(scored.new_logprobs), 1, dtype=torch.bool, device=new.device)
    loss, metrics = ppo_clip_loss(
        new_turn[:, None],
        old_turn[:, None].detach(),
        scored.advantages.float().to(new.device)[:, None],
        ones,
        eps_low=s.eps_low,
        eps_high=s.eps_high,
    )
    if s.entropy_coef > 0 and scored.entropies is None:
        raise ValueError("turn_ppo's entropy bonus needs the exact per-token entropies")
    if scored.entropies is not None:
        entropy = masked_mean(pad_ragged(scored.entropies)[0].to(new.device), mask)
        loss = loss - s.entropy_coef * entropy
        metrics["actor/entropy"] = entropy.item()
    metrics["actor/loss"] = loss.item()
    return loss, metrics


OBJECTIVES.register("token_ppo", Objective(token_ppo, unit="token"))
OBJECTIVES.register("turn_ppo", Objective(turn_ppo, unit="turn"))

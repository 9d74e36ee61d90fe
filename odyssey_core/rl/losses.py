"""Policy losses for the VLM actor (Odysseus paper Appendix C.1), one screen per idea.

Token conventions: a minibatch of B turns is padded to [B, T] response tokens with a bool
``mask`` that is True on real response tokens. "Token-mean" is the sum over the masked tokens
of the whole minibatch divided by their count (verl's ``token-mean`` aggregation), so every
response token weighs the same whatever the length of its turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_ragged(
    sequences: Sequence[torch.Tensor], pad_value: float | int | bool = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged 1-D tensors -> (padded [B, T_max], mask [B, T_max] True on real entries)."""
    if not sequences:
        raise ValueError("nothing to pad")
    lengths = torch.tensor([s.numel() for s in sequences])
    width = int(lengths.max())
    padded = torch.full((len(sequences), width), pad_value, dtype=sequences[0].dtype)
    for row, seq in enumerate(sequences):
        padded[row, : seq.numel()] = seq
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    return padded, mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean of x over the True entries of mask (0 when there are none)."""
    mask = mask.bool()  # where(), not x * mask: padding may hold inf or NaN
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1).to(x.dtype)


def broadcast_turn_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A_t of each turn copied onto its response tokens: [B] -> [B, T], 0 on padding."""
    return advantages.unsqueeze(-1) * mask.to(advantages.dtype)


def select_nonzero_advantage_turns(advantages: torch.Tensor) -> torch.Tensor:
    """Indices of turns with A_t != 0 exactly.

    A zero-advantage turn contributes a zero surrogate and a zero gradient, so skipping it
    changes nothing but the compute: with positive filtering (eq. 1) that is every turn that
    did not beat the critic. (It does change the token count of a token-mean, which is why the
    update is defined over the kept turns.)
    """
    return torch.nonzero(advantages != 0, as_tuple=False).flatten()


def episode_tail_turns(episode_ids: torch.Tensor, count: int) -> torch.Tensor:
    """bool [N]: the turn is one of the last ``count`` turns of its episode (episodes are
    contiguous runs of ``episode_ids``, in time order, as in a TurnBatch)."""
    if count < 0:
        raise ValueError(f"count is a number of turns (>= 0), got {count}")
    n = episode_ids.numel()
    if count == 0 or n == 0:
        return torch.zeros(n, dtype=torch.bool)
    _, episode_of, lengths = torch.unique_consecutive(
        episode_ids, return_inverse=True, return_counts=True
    )
    first_row = torch.cumsum(lengths, 0) - lengths
    turns_after = (first_row + lengths - 1)[episode_of] - torch.arange(n)
    return turns_after < count


def ppo_clip_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate, token level, asymmetric clip (Appendix C.1; Tables 4, 9):

        rho   = exp(log pi_theta - log pi_old)                  per response token
        L     = -token_mean( min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A) )

    With ``dual_clip`` c (> 1; dual-clip PPO, Ye et al. 2020), a token with A < 0 takes
    max(that surrogate, c * A): a very large ratio on a bad action no longer gives an unbounded
    loss and gradient. ``advantages`` is [B, T] (see :func:`broadcast_turn_advantages`).
    Metrics: the fraction of tokens where the clipped branch is strictly smaller (their gradient
    is zero), with ``dual_clip`` the fraction held at c * A, the k3-style approximate
    KL(old || new) = token_mean((rho - 1) - log rho), and the ratio mean and max.
    """
    mask = mask.bool()
    # Padding may hold anything; zero its log-ratio so exp() cannot overflow into the mean.
    log_ratio = (new_logprobs - old_logprobs).masked_fill(~mask, 0.0)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    held = torch.zeros_like(mask)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be above 1 (dual-clip PPO's c), got {dual_clip}")
        floor = dual_clip * advantages
        held = (advantages < 0) & (floor > surrogate)
        surrogate = torch.where(advantages < 0, torch.maximum(surrogate, floor), surrogate)
    loss = -masked_mean(surrogate, mask)
    with torch.no_grad():
        real = ratio[mask]
        metrics = {
            "actor/pg_loss": loss.item(),
            "actor/clip_frac": float(masked_mean((clipped < unclipped).to(ratio.dtype), mask)),
            "actor/approx_kl": float(masked_mean((ratio - 1.0) - log_ratio, mask)),
            "actor/ratio_mean": float(real.mean()) if real.numel() else float("nan"),
            "actor/ratio_max": float(real.max()) if real.numel() else float("nan"),
        }
        if dual_clip is not None:
            metrics["actor/dual_clip_frac"] = float(masked_mean(held.to(ratio.dtype), mask))
    return loss, metrics


def kl_penalty_k3(
    new_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref), token-mean (Schulman's "approximating KL"):

    d = log pi_ref - log pi_theta;   k3 = exp(d) - d - 1  (>= 0, unbiased under pi_theta).
    """
    d = (ref_logprobs - new_logprobs).masked_fill(~mask.bool(), 0.0)
    return masked_mean(torch.exp(d) - d - 1.0, mask)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Exact token-mean entropy H = -sum_v p_v log p_v from full logits [B, T, V]."""
    log_p = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(log_p.exp() * log_p).sum(dim=-1)
    return masked_mean(entropy, mask)


def actor_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    logits: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    token_entropy: torch.Tensor | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = L_clip + kl_coef * k3 - entropy_coef * H (both extras off by default, as in the paper).

    The entropy bonus needs the full distribution: the ``logits`` [B, T, V], or the exact
    per-token entropies ``token_entropy`` [B, T] computed from them (what ``HFPolicy.score``
    returns). An estimate from the sampled tokens' log-probs alone has the right value in
    expectation but not the entropy's gradient, so it is refused. Without a bonus, either
    only feeds the ``actor/entropy`` metric.
    """
    loss, metrics = ppo_clip_loss(
        new_logprobs, old_logprobs, advantages, mask, eps_low, eps_high, dual_clip
    )
    if kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs the reference policy's log-probs")
        kl = kl_penalty_k3(new_logprobs, ref_logprobs, mask)
        loss = loss + kl_coef * kl
        metrics["actor/kl_ref"] = kl.item()
    if entropy_coef > 0 and logits is None and token_entropy is None:
        raise ValueError("entropy_coef > 0 needs the full logits (or their exact entropies)")
    if logits is not None or token_entropy is not None:
        entropy = (
            entropy_from_logits(logits, mask)
            if logits is not None
            else masked_mean(token_entropy, mask)
        )
        if entropy_coef > 0:
            loss = loss - entropy_coef * entropy
        metrics["actor/entropy"] = entropy.item()
    metrics["actor/loss"] = loss.item()
    return loss, metrics


def combine_thought_action_logprobs(
    token_logprobs: torch.Tensor,
    thought_mask: torch.Tensor,
    action_mask: torch.Tensor,
    thought_weight: float,
) -> torch.Tensor:
    """Per-turn log pi(a_t) = lambda * sum_thought log p + sum_action log p, [B, T] -> [B].

    The GTR-style weighting: lambda scales how much the reasoning tokens count against the
    answer tokens; tokens in neither mask (padding, format tokens) do not count.
    """
    thought = torch.where(thought_mask.bool(), token_logprobs, 0.0).sum(dim=-1)
    action = torch.where(action_mask.bool(), token_logprobs, 0.0).sum(dim=-1)
    return thought_weight * thought + action

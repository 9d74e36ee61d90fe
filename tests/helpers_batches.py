"""Hand-made TurnBatches that hold only turn facts (no tokens): what metrics tests need."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from odyssey_core.rollout.batch import TurnBatch


def facts_batch(
    episode_ids: list[int],
    turn_index: list[int],
    levels: list[str],
    extras: list[dict[str, Any]],
    rewards: torch.Tensor,
    terminated: torch.Tensor,
) -> TurnBatch:
    """A batch of tokenless turns with these facts (tiny blank frames, no responses)."""
    n = len(episode_ids)
    empty = [torch.zeros(0, dtype=torch.long)] * n
    return TurnBatch(
        episode_ids=torch.tensor(episode_ids),
        turn_index=torch.tensor(turn_index),
        levels=list(levels),
        frames=[np.zeros((2, 2, 3), np.uint8)] * n,
        prompt_ids=empty,
        response_ids=empty,
        thought_mask=[torch.zeros(0, dtype=torch.bool)] * n,
        action_mask=[torch.zeros(0, dtype=torch.bool)] * n,
        behaviour_logprobs=[torch.zeros(0)] * n,
        rewards=rewards,
        terminated=terminated,
        truncated=torch.zeros(n, dtype=torch.bool),
        extras=extras,
    )

"""Minibatch samplers: how the trainer cuts a batch of turns into optimiser steps.

Every entry of :data:`SAMPLERS` is ``fn(batch_keys, size, generator) -> minibatches``:
``batch_keys`` is a long [N] tensor naming the unit each row belongs to (an episode, or a
group of episodes), ``size`` how many of the sampler's units go into one minibatch and
``generator`` the trainer's seeded torch.Generator; the result is one long tensor of row
indices per minibatch, every row in exactly one of them.

* ``shuffled_turns``: the turns are the unit. A random permutation of all N rows, cut into
  chunks of ``size`` turns; exactly ``torch.randperm(N, generator)`` then chunks, so runs
  that sampled this way before keep their numbers. The keys are not read.
* ``episodes``: ESPO's episodic batch sampler (section 4.3.2). Shuffling single steps breaks
  the temporal structure an episode-wise reward is computed over and spreads one episode's
  steps over many updates, so here the unit is a whole key: its rows stay together and in
  their original (time) order, the units are shuffled, and ``size`` units go into a
  minibatch (the paper: one episode per batch).
* ``shuffled_turns_equal_steps``: vanilla GRPO at ESPO's update count. The turns of every
  unit are shuffled together (a minibatch mixes turns of several episodes) and cut into as
  many minibatches as ``episodes`` makes from the same keys and ``size``, with sizes that differ
  by at most one turn; so on one batch both take the same optimiser steps over the same turns,
  and the comparison isolates the estimator and the step order from the update count.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from odyssey_core.common.registry import Registry

__all__ = ["SAMPLERS", "SamplerFn", "episodes", "shuffled_turns", "shuffled_turns_equal_steps"]

SamplerFn = Callable[[torch.Tensor, int, torch.Generator], list[torch.Tensor]]

SAMPLERS: Registry[SamplerFn] = Registry("minibatch sampler")


def _check(batch_keys: torch.Tensor, size: int) -> None:
    if batch_keys.ndim != 1:
        raise ValueError(f"batch_keys must be 1-D (one key per row), got {tuple(batch_keys.shape)}")
    if size < 1:
        raise ValueError(f"a minibatch needs at least one unit, got size {size}")


@SAMPLERS.register("shuffled_turns")
def shuffled_turns(
    batch_keys: torch.Tensor, size: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """randperm(N) cut into chunks of ``size`` rows (the last may be shorter)."""
    _check(batch_keys, size)
    order = torch.randperm(batch_keys.numel(), generator=generator)
    return [order[start : start + size] for start in range(0, order.numel(), size)]


@SAMPLERS.register("episodes")
def episodes(batch_keys: torch.Tensor, size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Whole units in shuffled order, ``size`` units per minibatch, each unit's rows in batch
    order. Units are numbered by first appearance before shuffling, so the draw depends only
    on the layout and the generator."""
    _check(batch_keys, size)
    units: dict[int, list[int]] = {}
    for row, key in enumerate(batch_keys.tolist()):
        units.setdefault(key, []).append(row)
    rows_of = list(units.values())
    order = torch.randperm(len(rows_of), generator=generator).tolist()
    return [
        torch.tensor([row for unit in order[start : start + size] for row in rows_of[unit]])
        for start in range(0, len(order), size)
    ]


@SAMPLERS.register("shuffled_turns_equal_steps")
def shuffled_turns_equal_steps(
    batch_keys: torch.Tensor, size: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """randperm(N) cut into ceil(units / ``size``) near-equal chunks (the first N mod chunks
    one turn longer): as many optimiser steps as :func:`episodes` takes on these keys."""
    _check(batch_keys, size)
    n = batch_keys.numel()
    if n == 0:
        return []
    steps = -(-len(set(batch_keys.tolist())) // size)
    order = torch.randperm(n, generator=generator)
    base, longer = divmod(n, steps)
    lengths = [base + 1] * longer + [base] * (steps - longer)
    return list(torch.split(order, lengths))

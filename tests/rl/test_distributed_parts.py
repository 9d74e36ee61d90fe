"""The parts of rank-aware RL, each checked with exact numbers: fp32 master weights in the
plain updater, how a step's budget and seeds are split over ranks, and the collectives
(gradient and state averaging, the gather of every rank's turns, metric reduction) on two
CPU ranks under torchrun."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_dist import run_on_ranks

from odyssey_core.rl.distributed import World, rank_seed, split_evenly
from odyssey_core.rl.trainer import collection_seed, planned_budget, rank_budget
from odyssey_core.rl.updater import PlainUpdater, UpdaterSettings
from odyssey_core.rollout.collector import EpisodeBudget, EpisodeStart, TurnBudget

# -- fp32 master weights ------------------------------------------------------------------------

W0 = 1e-3  # bf16 spacing here is 2**-17 = 7.6e-6: an lr-1e-6 step is below half of it
FP32_ULPS = 4 * 2**-33  # a few fp32 spacings at 1e-3 (2**-33 = 1.2e-10)


def _bf16_linear() -> torch.nn.Linear:
    model = torch.nn.Linear(4, 1, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        model.weight.fill_(W0)
    return model


def _steps(updater: PlainUpdater, model: torch.nn.Module, n: int) -> None:
    for _ in range(n):  # loss = sum(w): every gradient is exactly 1
        updater.backward(model.weight.float().sum(), True)
        updater.step()


def test_plain_adamw_on_bf16_weights_loses_small_updates() -> None:
    """What the master copy fixes: AdamW stepping bf16 weights in place rounds every lr-1e-6
    update away, forever."""
    model = _bf16_linear()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    start = model.weight.detach().clone()
    for _ in range(8):
        model.weight.float().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    assert torch.equal(model.weight, start)


def test_fp32_masters_keep_and_accumulate_updates_below_bf16_resolution() -> None:
    model = _bf16_linear()
    updater = PlainUpdater(model, UpdaterSettings(lr=1e-6, grad_clip=1e9))
    start = model.weight.detach().clone()
    ((weight, master),) = updater.copies
    assert weight is model.weight and master.dtype == torch.float32
    _steps(updater, model, 1)
    assert torch.equal(model.weight, start)  # the bf16 weight cannot show 1e-6 yet
    # Adam's first step is lr * g / (|g| + eps) = 1e-6 * (1 - 1e-8) per weight
    torch.testing.assert_close(master, start.float() - 1e-6, rtol=0, atol=FP32_ULPS)
    _steps(updater, model, 7)
    expected = start.float() - 8e-6  # eight steps of ~1e-6 each, kept in fp32
    torch.testing.assert_close(master, expected, rtol=0, atol=FP32_ULPS)
    assert torch.equal(model.weight, expected.to(torch.bfloat16))  # now one bf16 step lower
    assert not torch.equal(model.weight, start)


def test_fp32_masters_come_back_from_the_state_dict() -> None:
    model = _bf16_linear()
    updater = PlainUpdater(model, UpdaterSettings(lr=1e-6, grad_clip=1e9))
    _steps(updater, model, 3)
    state = updater.state_dict()
    exact = updater.copies[0][1].detach().clone()
    fresh_model = _bf16_linear()  # the rounded weights a checkpoint's model folder holds
    fresh = PlainUpdater(fresh_model, UpdaterSettings(lr=1e-6, grad_clip=1e9))
    fresh.load_state_dict(state)
    assert torch.equal(fresh.copies[0][1], exact)
    _steps(updater, model, 2)
    _steps(fresh, fresh_model, 2)
    assert torch.equal(fresh.copies[0][1], updater.copies[0][1])


def test_fp32_weights_get_no_copy() -> None:
    model = torch.nn.Linear(2, 1)
    updater = PlainUpdater(model, UpdaterSettings(lr=1e-3))
    assert updater.copies == [] and all(
        m is p for m, p in zip(updater.masters, model.parameters(), strict=True)
    )


# -- the split of a step over ranks -------------------------------------------------------------


def test_budgets_split_with_the_remainder_on_the_first_ranks() -> None:
    shares = [split_evenly(10, World(r, 4, r)) for r in range(4)]
    assert shares == [(0, 3), (3, 3), (6, 2), (8, 2)]
    starts = [EpisodeStart(level=f"odland-1-{k}") for k in range(1, 6)]
    budget, mine = rank_budget(EpisodeBudget(5), starts, World(1, 2, 1))
    assert budget == EpisodeBudget(2) and mine == starts[3:5]
    budget, mine = rank_budget(EpisodeBudget(5), starts, World(0, 2, 0))
    assert budget == EpisodeBudget(3) and mine == starts[:3]
    plan = rank_budget(EpisodeBudget(5), lambda k: starts[k], World(1, 2, 1))[1]
    assert callable(plan) and plan(0) == starts[3]  # its first episode is the plan's fourth
    assert rank_budget(TurnBudget(9), None, World(1, 2, 1)) == (TurnBudget(4), None)
    assert rank_budget(EpisodeBudget(5), starts, World()) == (EpisodeBudget(5), starts)
    with pytest.raises(ValueError, match="cannot be split over 4 ranks"):
        rank_budget(EpisodeBudget(3), None, World(3, 4, 3))


def test_a_short_listed_plan_sizes_the_step_and_a_long_one_is_refused() -> None:
    starts = [EpisodeStart(level=f"odland-1-{k}") for k in range(1, 5)]
    assert planned_budget(EpisodeBudget(6), starts) == EpisodeBudget(4)  # an epoch's last slice
    assert planned_budget(EpisodeBudget(4), starts) == EpisodeBudget(4)
    assert planned_budget(EpisodeBudget(6), None) == EpisodeBudget(6)
    assert planned_budget(TurnBudget(9), starts) == TurnBudget(9)
    with pytest.raises(ValueError, match="got 4 episode starts for a step budget of 3"):
        planned_budget(EpisodeBudget(3), starts)
    with pytest.raises(ValueError, match="plan for this step is empty"):
        planned_budget(EpisodeBudget(3), [])
    budget, mine = rank_budget(planned_budget(EpisodeBudget(6), starts), starts, World(1, 2, 1))
    assert budget == EpisodeBudget(2) and mine == starts[2:]


def test_rank_zero_keeps_the_one_process_seeds_and_other_ranks_get_their_own() -> None:
    seed = collection_seed(3, 0)
    assert rank_seed(seed, 0) == seed
    seeds = {rank_seed(seed, r) for r in range(8)}
    assert len(seeds) == 8
    assert rank_seed(seed, 1) == rank_seed(seed, 1)


# -- collectives on two ranks ---------------------------------------------------------------------

_SCRIPT = """
import json, sys, torch
from pathlib import Path
folder, tests = map(Path, sys.argv[1:3])
sys.path.insert(0, str(tests))
from helpers_batches import facts_batch
from odyssey_core.rl.distributed import (
    average_gradients, average_state, gather_turns, join_launched_world, leave_process_group,
    max_over_ranks, mean_over_ranks, sum_over_ranks,
)

world = join_launched_world("cpu")
r = world.rank
a, b, c = (torch.nn.Parameter(torch.zeros(n)) for n in (3, 2, 1))
a.grad = torch.full((3,), float(r + 1))
b.grad = torch.full((2,), 4.0) if r == 0 else None
average_gradients([a, b, c])

if r == 0:  # two episodes: 2 turns then 1 turn
    ids, turns, levels = [5, 5, 9], [0, 1, 0], ["odland-1-1"] * 2 + ["odland-1-2"]
    extras = [{"accuracy": 1.0, "response": "x"}, {"accuracy": 0.0}, {"intent_acc": 0.5}]
else:  # one episode of 3 turns
    ids, turns, levels = [0, 0, 0], [0, 1, 2], ["odland-1-2"] * 3
    extras = [{}, {"accuracy": 1.0}, {}]
n = len(ids)
batch = facts_batch(ids, turns, levels, extras, torch.arange(n, dtype=torch.float32) + 10 * r,
                    torch.tensor([False] * (n - 1) + [True]))
batch = batch.with_fields(
    values=torch.full((n,), 0.25 + r), group_id=torch.tensor([7 + r] * n),
    stage=["search"] * n,
)
union = gather_turns(batch)
state = average_state({"w": torch.tensor([1.0 + 2 * r]), "steps": torch.tensor([3 + r]),
                       "nested": [torch.tensor([2.0 * r])]})
out = {
    "grads": [None if p.grad is None else p.grad.tolist() for p in (a, b, c)],
    "episode_ids": union.batch.episode_ids.tolist(),
    "turn_index": union.batch.turn_index.tolist(),
    "rewards": union.batch.rewards.tolist(),
    "values": union.batch.values.tolist(),
    "group_id": union.batch.group_id.tolist(),
    "terminated": union.batch.terminated.tolist(),
    "levels": union.batch.levels,
    "stage": union.batch.stage,
    "extras": union.batch.extras,
    "offset": union.offset,
    "counts": union.counts,
    "local_rewards": union.local(union.batch.rewards).tolist(),
    "state": {"w": state["w"].tolist(), "steps": state["steps"].tolist(),
              "nested": state["nested"][0].tolist()},
    "max": max_over_ranks(3 * r + 1),
    "mean": mean_over_ranks({"x": float(r), **({"only_rank0": 5.0} if r == 0 else {})}),
    "sum": sum_over_ranks({"n": 2.0 + r}),
}
(folder / f"rank-{r}.json").write_text(json.dumps(out))
leave_process_group()
"""


def test_collectives_on_two_ranks(tmp_path: Path) -> None:
    first, second = run_on_ranks(_SCRIPT, tmp_path, Path(__file__).resolve().parents[1])
    for result in (first, second):
        # the mean gradient; a gradient only rank 0 had is averaged with rank 1's zeros, and
        # a tensor no rank had a gradient for keeps none
        assert result["grads"] == [[1.5, 1.5, 1.5], [2.0, 2.0], None]
        # rank 0's turns, then rank 1's; episodes renumbered over the union in that order
        assert result["episode_ids"] == [0, 0, 1, 2, 2, 2]
        assert result["turn_index"] == [0, 1, 0, 0, 1, 2]
        assert result["rewards"] == [0.0, 1.0, 2.0, 10.0, 11.0, 12.0]
        assert result["values"] == [0.25] * 3 + [1.25] * 3
        assert result["group_id"] == [7] * 3 + [8] * 3
        assert result["terminated"] == [False, False, True, False, False, True]
        assert result["levels"] == ["odland-1-1"] * 2 + ["odland-1-2"] * 4
        assert result["stage"] == ["search"] * 6
        # of the extras, only what estimators read travels
        assert result["extras"] == [
            {"accuracy": 1.0},
            {"accuracy": 0.0},
            {"intent_acc": 0.5},
            {},
            {"accuracy": 1.0},
            {},
        ]
        assert result["counts"] == [3, 3]
        assert result["state"] == {"w": [2.0], "steps": [3 + (result is second)], "nested": [1.0]}
        assert result["max"] == 4
        assert result["mean"] == {"x": 0.5, "only_rank0": 5.0}
        assert result["sum"] == {"n": 5.0}
    assert (first["offset"], second["offset"]) == (0, 3)
    assert first["local_rewards"] == [0.0, 1.0, 2.0]
    assert second["local_rewards"] == [10.0, 11.0, 12.0]

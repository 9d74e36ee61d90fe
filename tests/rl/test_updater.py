"""The updater's learning-rate schedules and its optimiser state."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from odyssey_core.rl.updater import PlainUpdater, UpdaterSettings, build_updater, lr_at

COSINE = UpdaterSettings(lr=1e-5, schedule="cosine", final_lr=1e-9, lr_steps=25)


def test_cosine_decays_to_the_floor_and_holds_there() -> None:
    # GTR Table 2: 1e-5 -> 1e-9 over 25 steps; halfway the cosine is exactly the midpoint
    assert lr_at(1e-5, 0, COSINE) == 1e-5
    assert lr_at(1e-5, 12.5, COSINE) == pytest.approx((1e-5 + 1e-9) / 2)  # type: ignore[arg-type]
    step_3 = 1e-9 + (1e-5 - 1e-9) * (1 + math.cos(math.pi * 3 / 25)) / 2
    assert lr_at(1e-5, 3, COSINE) == pytest.approx(step_3)
    for step in (25, 26, 30, 100, 10_000):  # held, never rising again
        assert lr_at(1e-5, step, COSINE) == 1e-9
    rates = [lr_at(1e-5, t, COSINE) for t in range(60)]
    assert all(a >= b for a, b in itertools.pairwise(rates))
    assert lr_at(3e-4, 7, UpdaterSettings(lr=3e-4)) == 3e-4  # constant


def test_plain_updater_follows_the_schedule_per_group_and_restores_it() -> None:
    torch.manual_seed(0)
    model, head = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    updater = PlainUpdater(model, COSINE, [{"params": list(head.parameters()), "lr": 1e-3}])
    seen = []
    for _ in range(30):
        seen.append([g["lr"] for g in updater.optimizer.param_groups])
        loss = model(torch.ones(1, 3)).sum() + head(torch.ones(1, 3)).sum()
        updater.backward(loss, True)
        updater.step()
        updater.end_of_step()
    assert seen[0] == [1e-5, 1e-3]
    assert seen[25:] == [[1e-9, 1e-9]] * 5  # both groups hold the same floor
    state = updater.state_dict()
    fresh = PlainUpdater(model, COSINE, [{"params": list(head.parameters()), "lr": 1e-3}])
    fresh.load_state_dict(state)
    assert fresh.steps_done == 30 and fresh.lr == 1e-9


def test_deepspeed_refuses_a_value_head_in_the_same_backward() -> None:
    settings = UpdaterSettings(lr=1e-3, deepspeed="zero2.json")  # type: ignore[arg-type]
    head = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="deepspeed: null"):
        build_updater(torch.nn.Linear(2, 1), settings, [{"params": list(head.parameters())}])

"""Evaluation statistics, checked against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from odyssey_core.eval.stats import (
    average_over_levels,
    level_stats,
    mean_se,
    relative_improvement,
    table_from_cells,
)


def test_mean_and_standard_error_by_hand() -> None:
    # values 2, 4, 6: mean 4, sample variance (4 + 0 + 4) / 2 = 4, sd 2, se 2 / sqrt(3)
    mean, se = mean_se([2.0, 4.0, 6.0])
    assert mean == 4.0
    assert se == pytest.approx(2 / math.sqrt(3))
    assert mean_se([5.0]) == (5.0, 0.0)
    assert all(math.isnan(v) for v in mean_se([]))


def test_average_over_levels_combines_standard_errors() -> None:
    a = level_stats("l1", [2.0, 4.0, 6.0])  # mean 4, se 1.1547
    b = level_stats("l2", [10.0, 14.0])  # mean 12, sd sqrt(8), se 2
    mean, se = average_over_levels([a, b])
    assert mean == 8.0  # unweighted mean of level means, not of the 5 episodes (6.8)
    assert se == pytest.approx(math.sqrt(4 / 3 + 4) / 2)
    # a level without finished episodes does not count
    empty = level_stats("l3", [], errors=2)
    assert average_over_levels([a, b, empty])[0] == 8.0
    assert empty.n == 0 and empty.errors == 2


def test_relative_improvement_and_table_metrics() -> None:
    assert relative_improvement(150.0, 100.0) == 0.5
    assert math.isnan(relative_improvement(1.0, 0.0))
    cells = {
        "base": {"x-1": level_stats("x-1", [100.0, 100.0], max_progress=900)},
        "new": {"x-1": level_stats("x-1", [200.0, 400.0], successes=1, max_progress=900)},
    }
    table = table_from_cells("t", cells, levels=["x-1"], base_agent="base")
    assert table.max_progress == {"x-1": 900}
    assert table.max_average() == 900
    assert table.improvement("new") == pytest.approx(2.0)  # (300 - 100) / 100
    metrics = table.metrics(prefix="eval/s/")
    assert metrics["eval/s/new/x-1/mean"] == 300.0
    assert metrics["eval/s/new/x-1/se"] == pytest.approx(100.0)  # sd 141.42 / sqrt(2)
    assert metrics["eval/s/new/x-1/success_rate"] == 0.5
    assert metrics["eval/s/new/average/rel_improvement"] == pytest.approx(2.0)


def test_gained_progress_is_summarised_separately() -> None:
    cell = level_stats("x-1", [300.0, 500.0], gained=[100.0, 200.0])
    assert cell.mean == 400.0 and cell.gained_mean == 150.0
    assert cell.gained_se == pytest.approx(50.0)

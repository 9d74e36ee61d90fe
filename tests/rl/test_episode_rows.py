"""The one batch-layout check every estimator runs (rl.advantages.check_episode_rows), the
Odysseus estimators' and ESPO's alike, and its messages."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from odyssey_core.recipes.espo.advantages import EspoAdvantageSettings, grpo_step
from odyssey_core.rl.advantages import ESTIMATORS, AdvantageSettings, check_episode_rows


@dataclass
class Rows:
    rewards: torch.Tensor
    episode_ids: torch.Tensor
    group_id: torch.Tensor | None = None
    values: torch.Tensor | None = None
    bootstrap_values: torch.Tensor | None = None

    @property
    def terminated(self) -> torch.Tensor:
        return torch.zeros_like(self.rewards, dtype=torch.bool)

    @property
    def truncated(self) -> torch.Tensor:
        return torch.zeros_like(self.rewards, dtype=torch.bool)


def test_a_good_layout_passes() -> None:
    check_episode_rows(torch.zeros(5), torch.tensor([0, 0, 1, 1, 2]))


def test_shapes_must_be_one_dimensional_and_equal() -> None:
    with pytest.raises(ValueError, match=r"1-D of equal length, got \(2, 2\) and \(4,\)"):
        check_episode_rows(torch.zeros(2, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got \(3,\) and \(4,\)"):
        check_episode_rows(torch.zeros(3), torch.zeros(4, dtype=torch.long))


def test_an_episode_split_in_two_is_named_with_its_unit() -> None:
    ids = torch.tensor([0, 1, 0])
    with pytest.raises(ValueError, match="each episode must be contiguous"):
        check_episode_rows(torch.zeros(3), ids)
    with pytest.raises(ValueError, match="each pseudo-episode must be contiguous"):
        check_episode_rows(torch.zeros(3), ids, unit="pseudo-episode")


def test_every_estimator_runs_the_check() -> None:
    split = Rows(torch.zeros(3), torch.tensor([0, 1, 0]), group_id=torch.zeros(3, dtype=torch.long))
    odysseus = ESTIMATORS.get("grpo_outcome")
    with pytest.raises(ValueError, match="each episode must be contiguous"):
        odysseus(split, AdvantageSettings(estimator="grpo_outcome", gamma=1.0))
    with pytest.raises(ValueError, match="each pseudo-episode must be contiguous"):
        grpo_step(split, EspoAdvantageSettings(estimator="grpo_step"))
    flat = Rows(torch.zeros(2, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D of equal length"):
        grpo_step(flat, EspoAdvantageSettings(estimator="grpo_step"))

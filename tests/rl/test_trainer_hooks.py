"""How the trainer asks its hooks where this step's episodes start: every hook is asked, at
most one may answer, and the answer is what the collector plays."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
import torch

from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.trainer import Trainer, TrainerHook
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import EpisodeStart

torch.set_num_threads(1)
tiny_model_dir = model_fixtures.tiny_model_dir
REPO = Path(__file__).resolve().parents[2]


class FixedLevel(TrainerHook):
    """Starts every episode of a step on one level; records the levels the batch played."""

    name = "fixed_level"

    def __init__(self, level: str, episodes: int) -> None:
        self.level, self.episodes = level, episodes
        self.played: set[str] = set()

    def episode_starts(self, trainer: Trainer) -> list[EpisodeStart]:
        return [EpisodeStart(level=self.level)] * self.episodes

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        self.played = set(batch.levels)
        return {}


class AskedButSilent(TrainerHook):
    """Answers None (as weight sync does after its push) and counts how often it is asked."""

    def __init__(self, name: str) -> None:
        self.name, self.asked = name, 0

    def episode_starts(self, trainer: Trainer) -> None:
        self.asked += 1
        return None


def _odysseus(tiny_model_dir: Path, out: Path) -> Trainer:
    """The tiny Odysseus run on level 1-1 only: its curriculum hook answers episode_starts."""
    settings = load_train_settings(
        REPO / "configs" / "odysseus" / "tiny.yaml",
        {
            "model": {"path": str(tiny_model_dir)},
            "levels": ["odland-1-1"],
            "rollout": {"num_trajectories": 2, "max_turns": 2, "generation": {"max_new_tokens": 8}},
        },
    )
    return build_trainer(settings, out)


def test_two_hooks_answering_episode_starts_is_an_error_naming_them(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = _odysseus(tiny_model_dir, tmp_path)
    assert "curriculum" in [hook.name for hook in trainer.hooks]
    trainer.hooks.append(FixedLevel("odland-1-2", episodes=2))
    with pytest.raises(ValueError, match=r"\['curriculum', 'fixed_level'\].*only one hook"):
        trainer.train_step()
    assert trainer.step == 0


def test_the_one_answer_is_played_and_every_hook_is_asked(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = _odysseus(tiny_model_dir, tmp_path)
    before, after = AskedButSilent("before"), AskedButSilent("after")
    fixed = FixedLevel("odland-1-2", episodes=2)  # not a level of the settings
    trainer.hooks = [before, fixed, after]
    trainer.train_step()
    assert fixed.played == {"odland-1-2"}
    assert before.asked == after.asked == 1

"""Choices the paper is silent on, taken from the public Odysseus release in the paper preset:
a malformed answer is not played and costs -100 (the next prompt says so), and each
trajectory's last 5 turns stay out of the policy update. Options elsewhere, off in tiny."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
import torch
from helpers_presets import odysseus_preset

from odyssey_core.envs.pyboy.env import MALFORMED_NOTE
from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.losses import episode_tail_turns

tiny_model_dir = model_fixtures.tiny_model_dir
MAX_TURNS = 6
DROP = 2


def test_episode_tail_turns_marks_the_last_n_of_each_episode() -> None:
    ids = torch.tensor([4, 4, 4, 9, 9, 1, 1, 1, 1, 7])
    f, t = False, True
    assert episode_tail_turns(ids, 2).tolist() == [f, t, t, t, t, f, f, t, t, t]
    assert episode_tail_turns(ids, 0).tolist() == [f] * 10
    assert episode_tail_turns(ids, 5).all()
    assert episode_tail_turns(torch.zeros(0, dtype=torch.long), 3).numel() == 0
    with pytest.raises(ValueError, match="count"):
        episode_tail_turns(ids, -1)


def test_a_training_step_penalises_malformed_answers_and_drops_each_trajectorys_tail(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    preset = odysseus_preset(
        tmp_path,
        tiny_model_dir,
        steps=1,
        levels=["odland-1-1"],
        env={"malformed_penalty": -100.0},
        rollout={
            "num_trajectories": 3,
            "max_turns": MAX_TURNS,
            "n_envs": 2,
            "generation": {"temperature": 1.0, "max_new_tokens": 8},
            "score_micro_batch": 4,
        },
        advantage={"estimator": "ppo_critic"},
        critic={"input_height": 36, "input_width": 40, "minibatch_size": 4, "update": "full_batch"},
        ppo={
            "minibatch_size": 64,
            "lr": 1e-3,
            "skip_zero_advantage": False,
            "drop_episode_tail": DROP,
        },
    )
    trainer = build_trainer(load_train_settings(preset), tmp_path / "run")
    seen: dict[str, object] = {}
    collect, fit = trainer.collector.collect, trainer.value_function.fit

    def collect_and_keep(*args, **kwargs):
        seen["batch"], rollout = collect(*args, **kwargs)
        return seen["batch"], rollout

    def fit_and_count(batch, returns):
        seen["fitted_turns"] = len(batch)
        return fit(batch, returns)

    trainer.collector.collect = collect_and_keep
    trainer.value_function.fit = fit_and_count
    metrics = trainer.train_step()
    trainer.close()

    batch = seen["batch"]
    malformed = torch.tensor([bool(e["invalid_action"]) for e in batch.extras])
    assert malformed.any(), "the untrained tiny model should write some unreadable answers"
    assert torch.equal(batch.rewards[malformed], torch.full((int(malformed.sum()),), -100.0))
    assert (batch.rewards[~malformed] >= 0).all()  # running / standing on flat ground
    tokenizer = trainer.policy.tokenizer
    for row in range(1, len(batch)):
        same_episode = batch.episode_ids[row] == batch.episode_ids[row - 1]
        prompt = tokenizer.decode(batch.prompt_ids[row])
        assert (MALFORMED_NOTE in prompt) == bool(same_episode and malformed[row - 1])

    _, lengths = torch.unique_consecutive(batch.episode_ids, return_counts=True)
    assert lengths.numel() == 3
    assert seen["fitted_turns"] == len(batch)  # the critic still learns every turn
    assert metrics["critic/optimizer_steps"] == 1.0  # one full-batch step over 4-turn chunks
    assert metrics["actor/turns"] == float(sum(max(0, int(n) - DROP) for n in lengths))


def test_the_paper_preset_takes_both_from_the_release_and_tiny_has_neither() -> None:
    for name in ("paper", "zero"):
        paper = load_train_settings(name)
        assert paper.env.malformed_penalty == -100.0 and paper.ppo.drop_episode_tail == 5
    tiny = load_train_settings("tiny")
    assert tiny.env.malformed_penalty is None and tiny.ppo.drop_episode_tail == 0

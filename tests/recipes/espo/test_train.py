"""The ESPO recipe on the one trainer: the episode schedule, stage rewards on replayed
demonstrations, the SFT cold start's examples, evaluation with an oracle policy, and one real
training step whose batch has the layout the ESPO estimator reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_persona import DemonstrationPolicy, tiny_dataset

from odyssey_core.envs.persona.dataset import read_dataset
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.protocol.gui import GuiAction, format_gui_answer, parse_gui_answer
from odyssey_core.recipes.espo.evaluation import evaluate_offline, evaluate_online
from odyssey_core.recipes.espo.metrics import evaluate_outcomes
from odyssey_core.recipes.espo.rewards import StageRewardSettings
from odyssey_core.recipes.espo.settings import load_espo_settings
from odyssey_core.recipes.espo.sft_data import build_sft_dataset, template_thought
from odyssey_core.recipes.espo.train import EpisodeSchedule, build_trainer
from odyssey_core.recipes.espo.wrapper import StageRewardWrapper
from odyssey_core.rl.trainer import TrainerHook

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("persona") / "tiny")


def test_schedule_visits_every_episode_once_per_epoch_in_a_seeded_order() -> None:
    ids = [f"e{i}" for i in range(5)]
    schedule = EpisodeSchedule(ids, episodes_per_step=2, samples=3, seed=7)
    assert schedule.per_epoch == 3  # ceil(5 / 2)
    epoch0 = [i for step in range(3) for i in schedule.step_episodes(step)]
    epoch1 = [i for step in range(3, 6) for i in schedule.step_episodes(step)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(5))
    assert epoch0 != epoch1  # reshuffled per epoch
    again = EpisodeSchedule(ids, episodes_per_step=2, samples=3, seed=7)
    assert [again.step_episodes(s) for s in range(6)] == [
        schedule.step_episodes(s) for s in range(6)
    ]

    class TrainerAtStep4:
        step = 4

    starts = schedule.episode_starts(TrainerAtStep4())  # type: ignore[arg-type]
    first = schedule.step_episodes(4)
    assert [(s.options["episode"], s.group, s.sample) for s in starts] == [
        (ids[i], i, g) for i in first for g in range(3)
    ]


def test_wrapper_pays_the_demonstration_full_reward_and_garbage_nothing(dataset: Path) -> None:
    episode = read_dataset(dataset, split="train")[0]
    env = StageRewardWrapper(PersonaEnv(dataset=dataset, mode="replay"), StageRewardSettings())
    env.reset(options={"episode": episode.episode_id})
    for step in episode.steps:
        _, reward, terminated, _, info = env.step(step.gold)
        assert reward == pytest.approx(1.0), (step.stage, info["reward_reason"])
        assert info["accuracy"] == 1.0 and info["format"] == 1.0
        assert (info["intent_acc"] is not None) == (step.stage == "pool")
    assert terminated
    env.reset(options={"episode": episode.episode_id})
    _, reward, *_, info = env.step("I would rather not say")
    assert reward == 0.0 and info["format"] == 0.0
    with pytest.raises(ValueError, match="replay-mode"):
        StageRewardWrapper(PersonaEnv(dataset=dataset, mode="online"))


def test_sft_examples_are_the_env_prompts_with_the_demonstrated_actions(
    dataset: Path, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    episodes = read_dataset(dataset, split="train")[:2]
    built = build_sft_dataset(dataset, episodes, tmp_path / "sft", history_window=2)
    rows = pq.read_table(tmp_path / "sft" / "data.parquet").to_pylist()
    assert built.samples == len(rows) == sum(len(e.steps) for e in episodes)
    env = PersonaEnv(dataset=dataset, mode="replay", history_window=2)
    expected = []
    for episode in episodes:
        observation, _ = env.reset(options={"episode": episode.episode_id})
        for step in episode.steps:
            expected.append((observation.text, step.gold, template_thought(step, episode)))
            observation, *_ = env.step(step.gold)
    by_text = {(r["turn_text"], r["response"]) for r in rows}
    for text, gold, thought in expected:
        parsed = parse_gui_answer(
            next(resp for t, resp in by_text if t == text and thought in resp)
        )
        assert parsed.valid and parsed.action == gold
    assert all(r["game"] == "persona" for r in rows)
    # the hidden profile never shows in a thought
    for episode in episodes:
        for step in episode.steps:
            assert episode.intent not in template_thought(step, episode)


def test_oracle_policy_scores_perfectly_offline_and_succeeds_online(dataset: Path) -> None:
    episodes = read_dataset(dataset, split="train")[:3]
    policy = DemonstrationPolicy(dataset, splits=("train",))
    outcomes = evaluate_offline(policy, dataset, episodes, split="train", n_envs=2)
    assert len(outcomes) == sum(len(e.steps) for e in episodes)
    metrics = evaluate_outcomes(outcomes, episodes=episodes, resamples=200)
    for key in ("ele_acc", "step_sr", "rec_acc", "format_valid", "op_f1"):
        assert metrics[key].value == pytest.approx(1.0), key
    online = evaluate_online(policy, dataset, episodes, split="train", n_envs=2, max_steps=60)
    assert [r.episode_id for r in online] == [e.episode_id for e in episodes]
    assert all(r.success and r.error is None for r in online), online
    assert [sorted(r.recommended) for r in online] == [sorted(e.yes_items) for e in episodes]


def test_a_policy_that_always_answers_no_gets_the_always_no_rec_acc(dataset: Path) -> None:
    episodes = read_dataset(dataset, split="train")[:3]
    no = GuiAction("recommendation", input_text="No")
    policy = DemonstrationPolicy(dataset, splits=())
    policy.wrong = format_gui_answer(no, "no")
    outcomes = evaluate_offline(policy, dataset, episodes, split="train", n_envs=3)
    recommend = [o for o in outcomes if o.step.stage == "recommend"]
    wanted = sum(o.step.gold.text == "No" for o in recommend) / len(recommend)
    metrics = evaluate_outcomes(outcomes, episodes=episodes, resamples=200)
    assert metrics["rec_acc"].value == pytest.approx(wanted)
    assert metrics["ele_acc"].value == 0.0
    assert all(o.predicted == no for o in outcomes)


class Capture(TrainerHook):
    name = "capture"

    def __init__(self) -> None:
        self.batches = []

    def on_batch(self, trainer, batch):
        self.batches.append(batch)
        return {}


def test_one_training_step_has_the_grouped_layout_and_checkpoints(
    dataset: Path, tmp_path: Path
) -> None:
    settings = load_espo_settings(
        "tiny",
        {
            "data": {"dataset": str(dataset)},
            "rollout": {
                "samples_per_step": 2,
                "episodes_per_step": 1,
                "generation": {"max_new_tokens": 6},
                "history_window": 1,
            },
            "checkpoint_every": 1,
        },
    )
    trainer = build_trainer(settings, tmp_path / "run")
    capture = Capture()
    trainer.hooks.append(capture)
    try:
        metrics = trainer.train_step()
        trainer.save()
    finally:
        trainer.close()
    (batch,) = capture.batches
    demonstrated = {e.episode_id: e for e in read_dataset(dataset, split="train")}
    (group,) = set(batch.group_id.tolist())
    episode = demonstrated[trainer.hook("episode_schedule").episode_ids[group]]
    T = len(episode.steps)
    assert len(batch) == 2 * T
    assert batch.sample_index.tolist() == [0] * T + [1] * T
    assert batch.stage == [s.stage for s in episode.steps] * 2
    assert batch.turn_index.tolist() == list(range(T)) * 2
    assert {"espo/format_valid", "espo/search_accuracy", "adv/mean"} <= set(metrics)
    assert trainer.config.steps == settings.epochs * len(demonstrated)  # one episode per step
    assert (tmp_path / "run" / "checkpoints").is_dir()

"""The paper's variants as comparisons of equals: vanilla GRPO takes ESPO's optimiser steps over
ESPO's turns with steps shuffled across episodes; No All and All SFT as the paper defines them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_persona import tiny_dataset

from odyssey_core.config import deep_merge
from odyssey_core.envs.persona.dataset import read_dataset
from odyssey_core.recipes.espo.pipeline import (
    espo_sft_settings,
    load_espo_pipeline_config,
    sft_epochs,
)
from odyssey_core.recipes.espo.settings import EspoSettings, load_espo_settings
from odyssey_core.recipes.espo.train import EpisodeSchedule, build_trainer, trainer_config
from odyssey_core.rl.samplers import SAMPLERS

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("persona") / "tiny")


def variant_settings(preset: str, variant: str) -> EspoSettings:
    cfg = load_espo_pipeline_config(preset, variant=variant)
    return load_espo_settings(cfg.train.preset, cfg.train.overrides)


def step_minibatches(
    settings: EspoSettings, lengths: list[int], step: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The units of training step ``step``'s batch as the trainer lays them out (each scheduled
    demonstration's G samples of its T turns, keyed by the demonstration's group) and the
    minibatches the configured sampler cuts them into, with the trainer's seeded generator."""
    schedule = EpisodeSchedule(
        [str(i) for i in range(len(lengths))],
        settings.rollout.episodes_per_step,
        settings.rollout.samples_per_step,
        settings.seed,
    )
    units = torch.tensor(
        [
            group
            for group in schedule.step_episodes(step)
            for _ in range(settings.rollout.samples_per_step)
            for _ in range(lengths[group])
        ]
    )
    config = trainer_config(settings, steps=1)
    generator = torch.Generator().manual_seed(config.seed)
    return units, SAMPLERS.get(config.sampler)(units, config.minibatch_size, generator)


@pytest.mark.parametrize("preset", ["tiny", "travel"])
def test_vanilla_grpo_takes_espos_steps_over_espos_turns_mixing_episodes(
    preset: str, dataset: Path
) -> None:
    espo, vanilla = variant_settings(preset, "espo"), variant_settings(preset, "vanilla_grpo")
    assert (espo.advantage.estimator, vanilla.advantage.estimator) == ("espo", "grpo_step")
    # the same rollout: the same demonstrations per step, the same samples of each
    assert espo.rollout == vanilla.rollout and espo.epochs == vanilla.epochs
    lengths = [len(e.steps) for e in read_dataset(dataset, split="train")]
    for step in range(4):
        units, espo_steps = step_minibatches(espo, lengths, step)
        same_units, vanilla_steps = step_minibatches(vanilla, lengths, step)
        assert torch.equal(units, same_units)
        # one optimiser step per demonstration (the last step of an epoch may have fewer)
        demonstrations = len(set(units.tolist()))
        assert 2 <= demonstrations <= espo.rollout.episodes_per_step
        assert len(vanilla_steps) == len(espo_steps) == demonstrations
        turns = sorted(torch.cat(vanilla_steps).tolist())
        assert turns == sorted(torch.cat(espo_steps).tolist()) == list(range(units.numel()))
        # ESPO: one demonstration (all its samples) per optimiser step; vanilla: several
        assert all(len(set(units[m].tolist())) == 1 for m in espo_steps)
        assert all(len(set(units[m].tolist())) > 1 for m in vanilla_steps)


def test_shuffling_across_episodes_refuses_one_episode_per_batch() -> None:
    with pytest.raises(ValueError, match="episodes_per_step is 1"):
        load_espo_settings(
            "tiny",
            {"rollout": {"episodes_per_step": 1}, "ppo": {"sampler": "shuffled_turns_equal_steps"}},
        )


@pytest.mark.parametrize("preset", ["tiny", "travel"])
def test_all_sft_runs_the_cold_starts_epochs_plus_the_rl_epochs_and_no_rl(preset: str) -> None:
    base = load_espo_pipeline_config(preset)
    rl_epochs = load_espo_settings(base.train.preset, base.train.overrides).epochs
    cfg = load_espo_pipeline_config(preset, variant="all_sft")
    assert not cfg.train.enabled and cfg.sft.enabled
    assert sft_epochs(cfg) == base.sft.epochs + rl_epochs
    assert espo_sft_settings(cfg).epochs == base.sft.epochs + rl_epochs
    # the formula follows the presets it reads: more ESPO epochs, more all-SFT epochs
    longer = load_espo_pipeline_config(
        preset, {"train": {"overrides": {"epochs": rl_epochs + 3}}}, variant="all_sft"
    )
    assert sft_epochs(longer) == base.sft.epochs + rl_epochs + 3
    # every other pipeline trains its cold start for sft.epochs
    assert sft_epochs(base) == espo_sft_settings(base).epochs == base.sft.epochs
    assert sft_epochs(load_espo_pipeline_config("travel", variant="all_sft")) == 1 + 6


def test_no_all_turns_off_both_framework_components_and_keeps_espos_training() -> None:
    espo = load_espo_pipeline_config("travel", variant="espo")
    cfg = load_espo_pipeline_config("travel", variant="no_all")
    assert not cfg.sft.enabled and cfg.train.enabled
    settings = load_espo_settings(cfg.train.preset, cfg.train.overrides)
    paper = load_espo_settings(espo.train.preset, espo.train.overrides)
    assert settings.advantage.w == 0.0
    # nothing else differs from ESPO's run: the estimator, sampler, epochs, rollout
    assert settings == paper.model_copy(
        update={"advantage": paper.advantage.model_copy(update={"w": 0.0})}
    )
    no_sft = load_espo_pipeline_config("travel", variant="no_sft")
    no_cout = load_espo_pipeline_config("travel", variant="no_cout")
    assert cfg.train == no_cout.train and cfg.sft == no_sft.sft


@pytest.mark.slow
def test_one_real_training_step_of_each_takes_the_same_updates_over_the_same_turns(
    dataset: Path, tmp_path: Path
) -> None:
    """The trainer's own counts (``actor/updates``, ``actor/turns``) for one step of ESPO and
    of vanilla GRPO from the same tiny start: equal, with two demonstrations in the batch."""
    counts = {}
    for variant in ("espo", "vanilla_grpo"):
        cfg = load_espo_pipeline_config("tiny", variant=variant)
        small = {
            "data": {"dataset": str(dataset)},
            "rollout": {
                "samples_per_step": 2,
                "generation": {"max_new_tokens": 6},
                "history_window": 1,
            },
        }
        settings = load_espo_settings(cfg.train.preset, deep_merge(cfg.train.overrides, small))
        trainer = build_trainer(settings, tmp_path / variant)
        try:
            metrics = trainer.train_step()
        finally:
            trainer.close()
        counts[variant] = (metrics["actor/updates"], metrics["actor/turns"])
    assert counts["espo"] == counts["vanilla_grpo"]
    assert counts["espo"][0] == 2.0  # one update per demonstration of the batch

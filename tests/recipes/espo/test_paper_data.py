"""The paper preset's data: which 102 of the 122 SmartSpot-like episodes it uses (the paper
drops 20 and does not say which; the preset leaves out medicine) and that they hold about the
paper's 1,713 steps."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from odyssey_core.envs.persona.dataset import generate_episodes
from odyssey_core.recipes.espo.data import generated_name
from odyssey_core.recipes.espo.settings import load_espo_settings

PAPER_EPISODES = 102
PAPER_STEPS = 1713


def test_the_paper_preset_uses_102_episodes_and_about_1713_steps() -> None:
    data = load_espo_settings("paper").data
    assert data.preset == "smartspot_like" and data.exclude_channels == ["medicine"]
    episodes = generate_episodes(
        data.preset,
        data.seed,
        drop_channel=data.drop_channel,
        exclude_channels=data.exclude_channels,
    )
    assert len(episodes) == PAPER_EPISODES
    steps = sum(len(e.steps) for e in episodes)
    assert abs(steps - PAPER_STEPS) <= 0.05 * PAPER_STEPS, steps
    assert "medicine" not in Counter(e.channel for e in episodes)
    assert Counter(e.split for e in episodes) == {"train": 82, "val": 10, "test": 10}
    name = generated_name(data.preset, data.seed, data.drop_channel, data.exclude_channels)
    assert name == "smartspot_like-seed0-without-medicine"


def test_the_tiny_preset_keeps_every_channel() -> None:
    data = load_espo_settings("tiny").data
    assert data.exclude_channels == [] and data.drop_channel is None
    assert len(generate_episodes(data.preset, data.seed)) == 14
    assert Path(generated_name(data.preset, data.seed, None)).name == "tiny-seed0"

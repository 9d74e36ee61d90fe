"""Choices of ESPO's paper preset where the paper is silent (each a row of docs/paper_map.md)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from odyssey_core.recipes.espo.advantages import (
    EMPTY_STAGE_GATE,
    EspoAdvantageSettings,
    cout_reward,
    episode_cout_rewards,
    gate,
)
from odyssey_core.recipes.espo.settings import EspoPPOSettings, load_espo_settings
from odyssey_core.recipes.espo.train import trainer_config
from tests.helpers_batches import facts_batch


def test_the_paper_preset_generates_up_to_gui_r1s_1024_tokens() -> None:
    # GUI-R1's response budget: a think block and the answer dictionary at a 3B model's length
    assert load_espo_settings("paper").rollout.generation.max_new_tokens == 1024


SIGMA1 = 1 / (1 + math.exp(-1))  # sigma(1), the gate of one right recommend step


def no_search_batch():
    """One demonstrated episode with no search steps (pool, then one recommend step), G = 2:
    sample 0 recommends right, sample 1 wrong; both state the intent exactly."""
    accuracy = {"pool": [1.0, 1.0], "recommend": [1.0, 0.0]}
    rows = [(g, t, stage) for g in range(2) for t, stage in enumerate(("pool", "recommend"))]
    extras = [
        {"intent_acc" if stage == "pool" else "accuracy": accuracy[stage][g]}
        for g, _, stage in rows
    ]
    batch = facts_batch(
        [g for g, _, _ in rows],
        [t for _, t, _ in rows],
        ["persona"] * len(rows),
        extras,
        torch.tensor([0.8 * e.get("accuracy", e.get("intent_acc")) + 0.2 for e in extras]),
        torch.tensor([t == 1 for _, t, _ in rows]),
    )
    return batch.with_fields(
        group_id=torch.zeros(len(rows), dtype=torch.long),
        sample_index=torch.tensor([g for g, _, _ in rows]),
        stage=[stage for _, _, stage in rows],
    )


def test_the_empty_stage_gate_is_one_setting_with_a_documented_default() -> None:
    assert EspoAdvantageSettings().empty_stage_gate == EMPTY_STAGE_GATE == 0.5
    assert load_espo_settings("paper").advantage.empty_stage_gate == 0.5
    opened = load_espo_settings("tiny", {"advantage": {"empty_stage_gate": 1.0}})
    assert opened.advantage.empty_stage_gate == 1.0
    with pytest.raises(ValidationError, match="empty_stage_gate"):
        EspoAdvantageSettings(empty_stage_gate=1.5)


@pytest.mark.parametrize("accumulation", ["signed", "centred_mean", "sum", "mean"])
@pytest.mark.parametrize("empty", [0.5, 1.0, 0.0])
def test_every_reading_gives_an_empty_stage_the_setting(accumulation, empty) -> None:
    for k in (0.5, 1.0, 3.0):
        assert gate([], k, accumulation, empty) == empty
        assert gate(torch.zeros(0), k, accumulation, empty) == empty
    settings = EspoAdvantageSettings(accumulation=accumulation, empty_stage_gate=empty)
    # phi (no search steps) is the setting; psi gates the one recommend step
    psi = gate([1.0], 1.0, accumulation)
    assert cout_reward([], [1.0], 0.5, settings) == pytest.approx((empty + psi) * 0.5)
    assert cout_reward([1.0], [], 0.5, settings) == pytest.approx((psi + empty) * 0.5)


def test_the_estimator_reads_the_empty_stage_gate() -> None:
    batch = no_search_batch()
    for empty in (0.5, 1.0):
        settings = EspoAdvantageSettings(empty_stage_gate=empty)
        cout = episode_cout_rewards(batch, settings).tolist()
        # R_COUT = (phi + psi) * Intent_acc: phi = the setting, psi = sigma(+-1)
        right, wrong = empty + SIGMA1, empty + (1 - SIGMA1)
        assert cout == pytest.approx([right, right, wrong, wrong], abs=1e-6)


def test_dual_clip_is_off_by_default_and_the_paper_preset_takes_easyr1s_3() -> None:
    assert EspoPPOSettings().dual_clip is None
    paper = load_espo_settings("paper")  # EasyR1's actor default clip_ratio_dual: 3.0
    assert trainer_config(paper, steps=1).objective_settings.dual_clip == 3.0
    off = load_espo_settings("paper", {"ppo": {"dual_clip": None}})
    assert trainer_config(off, steps=1).objective_settings.dual_clip is None
    with pytest.raises(ValueError, match="dual_clip"):
        load_espo_settings("paper", {"ppo": {"dual_clip": 1.0}})

"""Choices of ESPO's paper preset where the paper is silent (each a row of docs/paper_map.md)."""

from __future__ import annotations

from odyssey_core.recipes.espo.settings import load_espo_settings


def test_the_paper_preset_generates_up_to_gui_r1s_1024_tokens() -> None:
    # GUI-R1's response budget: a think block and the answer dictionary at a 3B model's length
    assert load_espo_settings("paper").rollout.generation.max_new_tokens == 1024

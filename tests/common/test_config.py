from pathlib import Path

import pytest

from odyssey_core.config import GameBoyEnvConfig, available_presets, load_config


def test_presets_load_into_models() -> None:
    assert {"tiny", "paper"} <= set(available_presets())
    tiny = load_config("tiny")
    assert tiny.env.game == "odland" and tiny.env.max_turns == 80
    paper = load_config("paper")
    assert paper.env.game == "mario" and paper.env.max_turns == 400
    assert (paper.env.hold_frames, paper.env.jump_hold_frames) == (5, 15)
    assert paper.env.reward_scale == 10.0


def test_overrides_merge_into_sections() -> None:
    config = load_config("tiny", {"env": {"level": "2-1"}})
    assert config.env.level == "2-1" and config.env.max_turns == 80


def test_unknown_keys_and_bad_values_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_turn"):
        load_config("tiny", {"env": {"max_turn": 3}})
    with pytest.raises(ValueError, match="invalid_action"):
        load_config("tiny", {"env": {"invalid_action": "jump"}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just a list\n")
    with pytest.raises(ValueError, match="mapping of sections"):
        load_config(bad)


def test_missing_preset_names_the_known_ones() -> None:
    with pytest.raises(FileNotFoundError, match="tiny"):
        load_config("no-such-preset")


def test_defaults_are_the_papers_turn_semantics() -> None:
    config = GameBoyEnvConfig()
    assert (config.hold_frames, config.jump_hold_frames, config.settle_frames) == (5, 15, 1)
    assert config.max_turns == 400

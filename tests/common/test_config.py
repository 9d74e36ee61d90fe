from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import Field, ValidationError

from odyssey_core.config import (
    GameBoyEnvConfig,
    StrictModel,
    available_presets,
    load_config,
    load_preset,
    redefault,
    renamed_keys_used,
)


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


# -- renamed keys, shared bounds, moved folders ----------------------------------------------------


class _Inner(StrictModel):
    clip_low: float = Field(default=0.2, ge=0, lt=1)


class _Renamed(StrictModel):
    renamed_keys: ClassVar[Mapping[str, str]] = {
        "estimator": "advantage.estimator",
        "ppo.eps_low": "ppo.clip_low",
    }

    ppo: _Inner = _Inner()


class _Narrowed(_Inner):
    clip_low: float = redefault(_Inner, "clip_low", 0.1, "the recipe's value")


def test_a_renamed_key_fails_naming_its_replacement() -> None:
    with pytest.raises(ValidationError) as raised:
        _Renamed.model_validate({"estimator": "gae", "ppo": {"eps_low": 0.1}})
    message = str(raised.value)
    assert "estimator was renamed: use advantage.estimator" in message
    assert "ppo.eps_low was renamed: use ppo.clip_low" in message
    assert renamed_keys_used({"ppo": {"clip_low": 0.1}}, _Renamed.renamed_keys) == []
    assert renamed_keys_used({"ppo": 3}, _Renamed.renamed_keys) == []  # not a mapping: not set
    assert _Renamed.model_validate({"ppo": {"clip_low": 0.1}}).ppo.clip_low == 0.1


def test_redefault_keeps_the_bounds_and_changes_the_default() -> None:
    assert _Narrowed().clip_low == 0.1
    assert _Narrowed.model_fields["clip_low"].description == "the recipe's value"
    with pytest.raises(ValidationError, match="less than 1"):
        _Narrowed(clip_low=1.5)
    assert _Inner().clip_low == 0.2  # the base keeps its own


def test_a_preset_in_a_moved_folder_is_told_where_it_went(tmp_path: Path) -> None:
    old = tmp_path / "configs" / "old_place" / "tiny.yaml"
    with pytest.raises(FileNotFoundError, match=r"configs/old_place/ moved to configs/new/place/"):
        load_preset(_Inner, old, kind="new/place", moved_from="old_place")
    with pytest.raises(FileNotFoundError) as raised:
        load_preset(_Inner, tmp_path / "elsewhere.yaml", kind="new/place", moved_from="old_place")
    assert "moved to" not in str(raised.value)

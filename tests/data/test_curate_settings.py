"""Curation settings from the environment and from files: the OpenAI-compatible teacher's
variables, the presets' freedom from placeholders, and the list of the user's own videos."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from odyssey_core.config import config_dir
from odyssey_core.data.cli import curate_problems, import_entries, load_curate_config
from odyssey_core.data.teachers import (
    OpenAITeacher,
    TeacherConfig,
    make_teacher,
    resolve_teacher,
    teacher_problems,
)

VARIABLES = {
    "model_env": "T_MODEL",
    "base_url_env": "T_URL",
    "api_key_env": "T_KEY",
}


def test_the_teacher_reads_model_and_endpoint_from_the_environment(monkeypatch) -> None:
    config = TeacherConfig(name="openai", options=dict(VARIABLES))
    problems = teacher_problems(config, {})
    assert [p.split()[2] for p in problems] == ["T_MODEL", "T_URL", "T_KEY"]
    with pytest.raises(ValueError, match=r"T_MODEL.*T_URL"):
        resolve_teacher(config, {})
    environ = {"T_MODEL": "vlm-7b", "T_URL": "http://127.0.0.1:9/v1", "T_KEY": "secret"}
    assert teacher_problems(config, environ) == []
    resolved = resolve_teacher(config, environ)
    assert resolved.options["model"] == "vlm-7b"
    assert resolved.options["base_url"] == "http://127.0.0.1:9/v1"
    assert "secret" not in resolved.options.values()  # the key stays in the environment
    # a value in the preset wins over its variable; the programmatic teacher needs nothing
    fixed = TeacherConfig(name="openai", options={**VARIABLES, "model": "pinned"})
    assert resolve_teacher(fixed, environ).options["model"] == "pinned"
    assert teacher_problems(TeacherConfig(), {}) == []
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    teacher = make_teacher(config, game="mario", client=object())
    assert isinstance(teacher, OpenAITeacher) and teacher.label() == "openai:vlm-7b"
    assert teacher.settings.base_url == "http://127.0.0.1:9/v1"


_PLACEHOLDER = re.compile(r"\b[A-Z]{3,}(?:-[A-Z]{2,})+\b|/path/to|\bTODO\b|example\.com")


@pytest.mark.parametrize("preset", sorted(p.stem for p in (config_dir() / "curate").glob("*.yaml")))
def test_curation_presets_hold_no_placeholders(preset: str) -> None:
    config = load_curate_config(preset)
    values = [str(v) for v in config.teacher.options.values()]
    assert not [v for v in values if _PLACEHOLDER.search(v)]
    if config.teacher.name == "openai":
        assert "model" not in config.teacher.options and "base_url" not in config.teacher.options
        assert {"model_env", "base_url_env", "api_key_env"} <= set(config.teacher.options)


def test_imports_from_a_file_of_the_users_videos(tmp_path: Path) -> None:
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "w1.mp4").write_bytes(b"")
    listing = videos / "walkthroughs.yaml"
    listing.write_text(
        "- video: w1.mp4\n  segments: [{level: '1-1', start_s: 0, end_s: 5}]\n"
        f"- video: {videos / 'w2.mp4'}\n  segments: [{{level: '4-2', start_s: 0, end_s: 5}}]\n"
    )
    config = load_curate_config("mario", {"source": "import", "imports_file": str(listing)})
    entries = import_entries(config)
    assert [e.video for e in entries] == [videos / "w1.mp4", videos / "w2.mp4"]
    assert {e.game for e in entries} == {"mario"}  # the curation's game
    environ = {"ODYSSEY_TEACHER_MODEL": "m", "ODYSSEY_TEACHER_BASE_URL": "u"}
    environ["ODYSSEY_TEACHER_API_KEY"] = "k"
    assert curate_problems(config, environ) == [f"curate: video not found: {videos / 'w2.mp4'}"]
    no_videos = load_curate_config("mario", {"source": "import"})
    assert any("imports or imports_file" in p for p in curate_problems(no_videos, environ))


def test_curate_run_names_missing_settings_before_recording(tmp_path: Path, monkeypatch) -> None:
    from odyssey_core.data.cli import curate

    for name in ("ODYSSEY_TEACHER_MODEL", "ODYSSEY_TEACHER_BASE_URL", "ODYSSEY_TEACHER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="ODYSSEY_TEACHER_MODEL") as raised:
        curate(load_curate_config("paper"), tmp_path / "out")
    assert "ODYSSEY_TEACHER_API_KEY" in str(raised.value)
    assert not (tmp_path / "out").exists()  # nothing was recorded

"""The Odysseus presets run the paper's experiments as published: the five training levels
and a held-out set never trained on, Odysseus-Zero, Section 4.2's comparison on a start state
with a turn-sample budget, the Super Mario Land pipeline, and evaluation with the training
inference settings. Config resolution only: no ROM, no model, no GPU."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from odyssey_core.config import config_dir
from odyssey_core.envs.pyboy.levels import MARIO_LEVELS
from odyssey_core.eval.suites import load_suite
from odyssey_core.recipes.odysseus import pipeline
from odyssey_core.recipes.odysseus.pipeline import (
    PipelineSettingsError,
    check_pipeline,
    load_pipeline_config,
    pipeline_inference,
    stage_games,
    stage_record,
)
from odyssey_core.recipes.odysseus.settings import load_train_settings

CONFIGS = config_dir()
PAPER_LEVELS = ["mario-1-1", "mario-1-2", "mario-1-3", "mario-2-1", "mario-2-2"]
TEACHER_VARIABLES = ("ODYSSEY_TEACHER_MODEL", "ODYSSEY_TEACHER_BASE_URL", "ODYSSEY_TEACHER_API_KEY")


def _heldout(suite_name: str, game: str) -> set[str]:
    suite = load_suite(suite_name)
    return {
        f"{suite.section_game(s)}-{level}"
        for s in suite.sections
        if s.split == "heldout" and suite.section_game(s) == game
        for level in s.levels
    }


def _mario_rl_presets() -> list[Path]:
    """Every RL preset that trains on Super Mario Land (the paper's game), but compare_mario
    (1-1 only, from the user's own state file: see test_compare_mario_is_...)."""
    return [
        path
        for path in sorted((CONFIGS / "odysseus").rglob("*.yaml"))
        if "pipeline" not in path.relative_to(CONFIGS / "odysseus").parts
        and path.stem != "compare_mario"
        and load_train_settings(path).levels[0].startswith("mario-")
    ]


def test_paper_trains_on_the_five_levels_and_zero_is_the_same_run_on_the_base_model() -> None:
    paper = load_train_settings("paper")
    assert paper.levels == PAPER_LEVELS  # Section 7: "the first five levels of the game"
    assert paper.steps == 190 and paper.curriculum.enabled
    zero = load_train_settings("zero")
    assert zero.steps == 175  # Table 9: training steps of Odysseus-Zero
    assert zero.model.path == Path("models/Qwen3-VL-8B-Instruct")  # RL on the base model
    assert paper.model.path != zero.model.path
    assert zero.model_copy(update={"steps": 190, "model": paper.model}) == paper
    # the base model of the pipeline's SFT stage is the one Zero starts from
    assert load_pipeline_config("paper").sft.base_model == str(zero.model.path)


@pytest.mark.parametrize("preset", ["paper", "zero"])
def test_paper_rl_presets_never_train_on_the_mario_suites_heldout_levels(preset: str) -> None:
    heldout = _heldout("mario", "mario")
    assert heldout == {f"mario-{lv}" for lv in ("3-1", "3-2", "3-3", "4-1", "4-2")}
    assert set(load_train_settings(preset).levels).isdisjoint(heldout)
    assert set(load_train_settings(preset).levels) | heldout == {
        f"mario-{lv}" for lv in MARIO_LEVELS
    }


def test_every_pipeline_preset_keeps_its_heldout_levels_unseen() -> None:
    presets = sorted(p.stem for p in (CONFIGS / "odysseus" / "pipeline").glob("*.yaml"))
    assert {"paper", "tiny", "demo"} <= set(presets)
    for name in presets:
        cfg = load_pipeline_config(name)
        rl = load_train_settings(pipeline._rl_preset_path(cfg.train.preset), cfg.train.overrides)
        heldout = _heldout(cfg.eval.suite, cfg.game)
        assert set(rl.levels).isdisjoint(heldout), (name, rl.levels, heldout)
    # and every Super Mario Land RL preset against the suite it is evaluated on
    assert {p.stem for p in _mario_rl_presets()} == {"paper", "zero"}
    for path in _mario_rl_presets():
        assert set(load_train_settings(path).levels).isdisjoint(_heldout("mario", "mario"))


# -- Section 4.2: the comparison ----------------------------------------------------------------


def test_compare_plays_the_packaged_scenario_for_80_turns_until_038m_turn_samples() -> None:
    from odyssey_core.eval.scenarios import SCENARIOS

    s = load_train_settings("compare")
    scenario = SCENARIOS["tall-pipe-two-walkers"]
    assert s.levels == [scenario.env_id] and s.rollout.max_turns == 80
    assert s.rollout.start_states == {scenario.env_id: scenario.relative_path(CONFIGS.parent)}
    assert s.max_turn_samples == 380_000  # Figure 4: samples limited to 0.38M
    # the budget, not the step cap, ends a run of full-length episodes
    assert s.steps * s.rollout.num_trajectories * s.rollout.max_turns > s.max_turn_samples
    assert s.model.path == Path("models/Qwen3-VL-8B-Instruct")  # App. C.2: the base model
    # Table 4 is the paper preset's base too, with Table 9 and no budget laid over it
    assert load_train_settings("paper").max_turn_samples is None


def test_compare_mario_is_compare_on_the_users_state(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("states/mario-1-1/tall-pipe-two-enemies.state")):
        load_train_settings("compare_mario")  # the path the user fills, named when missing
    state = tmp_path / "mine.state"
    state.write_bytes(b"not checked here")
    mine = {"rollout": {"start_states": {"mario-1-1": state}}}
    mario = load_train_settings("compare_mario", mine)
    assert mario.levels == ["mario-1-1"] and mario.env.game == mario.model.game == "mario"
    odland = load_train_settings("compare")
    same = mario.model_copy(
        update={
            "levels": odland.levels,
            "env": odland.env,
            "model": odland.model,
            "rollout": mario.rollout.model_copy(
                update={
                    "start_states": odland.rollout.start_states,
                    "start_scenarios": odland.rollout.start_scenarios,
                }
            ),
        }
    )
    assert same == odland


# -- the Super Mario Land pipeline ----------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\b[A-Z]{3,}(?:-[A-Z]{2,})+\b|/path/to|<[^>]+>|\bTODO\b|example\.com")


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_every_stage_of_the_mario_pipeline_resolves_to_mario() -> None:
    import yaml

    from odyssey_core.data.cli import load_curate_config

    deployments = yaml.safe_load((CONFIGS.parent / "prefect.yaml").read_text())["deployments"]
    train = "flows/odysseus.py:train_odysseus_flow"  # train-odysseus/mario (not nightly-eval/mario)
    [mario] = [d for d in deployments if d["name"] == "mario" and d["entrypoint"] == train]
    cfg = load_pipeline_config(mario["parameters"]["preset"], mario["parameters"]["overrides"])
    assert cfg.game == "mario"
    assert stage_games(cfg) == dict.fromkeys(("curate", "sft", "rl", "evaluate"), "mario")
    curate = load_curate_config(cfg.curate.preset, cfg.curate.overrides)
    assert curate.source == "record" and curate.record.levels == list(MARIO_LEVELS)
    teacher = curate.teacher.options
    assert curate.teacher.name == "openai" and "model" not in teacher
    assert (teacher["model_env"], teacher["base_url_env"], teacher["api_key_env"]) == (
        "ODYSSEY_TEACHER_MODEL",
        "ODYSSEY_TEACHER_BASE_URL",
        "ODYSSEY_TEACHER_API_KEY",
    )
    found = [s for s in _strings(curate.model_dump(mode="json")) if _PLACEHOLDER.search(s)]
    assert not found, f"placeholder strings in the mario curation: {found}"
    # the user's own videos instead: still mario, whatever the entries say
    imported = load_pipeline_config(
        "paper",
        {"curate": {"overrides": {"source": "import", "imports": [_video_entry("a.mp4")]}}},
    )
    assert stage_games(imported)["curate"] == "mario"
    with pytest.raises(ValueError, match="is odland, the curation is mario"):
        stage_games(
            load_pipeline_config(
                "paper",
                {
                    "curate": {
                        "overrides": {
                            "source": "import",
                            "imports": [{**_video_entry("a.mp4"), "game": "odland"}],
                        }
                    }
                },
            )
        )


def _video_entry(video: str) -> dict[str, Any]:
    return {"video": video, "segments": [{"level": "1-1", "start_s": 0, "end_s": 1}]}


def _no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*TEACHER_VARIABLES, "ODYSSEY_SML_ROM"):
        monkeypatch.delenv(name, raising=False)


def test_a_missing_setting_fails_before_any_work_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_settings(monkeypatch)
    base = tmp_path / "base-model"
    cfg = load_pipeline_config("paper", {"run_dir": str(tmp_path / "run")})
    with pytest.raises(PipelineSettingsError) as raised:
        stage_record(cfg)
    message = str(raised.value)
    for name in (*TEACHER_VARIABLES, "ODYSSEY_SML_ROM", "sft.base_model"):
        assert name in message
    assert not (tmp_path / "run" / "curate").exists()  # nothing was started

    # all set: the check passes; an import without videos is named too
    base.mkdir()
    (base / "config.json").write_text("{}")
    rom = tmp_path / "sml.gb"
    rom.write_bytes(b"\0")
    environ = {
        "ODYSSEY_TEACHER_MODEL": "some-vlm",
        "ODYSSEY_TEACHER_BASE_URL": "http://127.0.0.1:9/v1",
        "ODYSSEY_TEACHER_API_KEY": "none",
        "ODYSSEY_SML_ROM": str(rom),
    }
    ready = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"base_model": str(base)})})
    check_pipeline(ready, environ)
    imports = tmp_path / "walkthroughs.yaml"
    imports.write_text("- video: missing.mp4\n  segments: [{level: '1-1', start_s: 0, end_s: 1}]\n")
    importing = load_pipeline_config(
        "paper",
        {
            "sft": {"base_model": str(base)},
            "curate": {"overrides": {"source": "import", "imports_file": str(imports)}},
        },
    )
    with pytest.raises(PipelineSettingsError, match=r"video not found: .*missing\.mp4"):
        check_pipeline(importing, environ)
    # the teacher's model and endpoint are the environment's, so they are in the fingerprint
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    teacher = pipeline._curate_config(ready).teacher.options
    assert (teacher["model"], teacher["base_url"]) == ("some-vlm", "http://127.0.0.1:9/v1")
    assert "none" not in _strings(teacher)  # the key is read by the backend, never copied


# -- evaluation answers as training did (App. E.3) -------------------------------------------------


def test_evaluation_uses_the_rl_presets_inference_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paper = pipeline_inference(load_pipeline_config("paper"))
    assert (paper.image_scale, paper.max_new_tokens, paper.temperature, paper.top_p) == (
        8,
        4096,
        1.0,
        1.0,
    )
    assert (paper.device, paper.dtype) == ("cuda", "bfloat16")
    with pytest.raises(ValueError, match="max_new_tokens"):  # not typed again in the pipeline
        load_pipeline_config("tiny", {"eval": {"max_new_tokens": 16}})

    # the evaluate stage, the gate and the nightly run all go through evaluate_checkpoint
    cfg = load_pipeline_config("tiny", {"run_dir": str(tmp_path / "run")})
    built: dict[str, Any] = {}

    class Backend:
        system_prompt = ""

    def make_policy(name: str, **kwargs: Any) -> Backend:
        built.update(name=name, **kwargs)
        return Backend()

    def evaluate_suite(suite: Any, agents: list[Any], **_: Any) -> Any:
        built["params"] = agents[0].params
        raise StopIteration  # enough: the agent is built

    import odyssey_core.eval.agents as agents_module
    import odyssey_core.eval.runner as runner_module

    monkeypatch.setattr(pipeline, "fetch", lambda cfg, uri, dest: dest)
    monkeypatch.setattr(agents_module, "make_policy", make_policy)
    monkeypatch.setattr(runner_module, "evaluate_suite", evaluate_suite)
    with pytest.raises(StopIteration):
        pipeline.evaluate_checkpoint(cfg, "file:///x", "candidate", tmp_path / "e")
    rl = load_train_settings(pipeline._rl_preset_path(cfg.train.preset), cfg.train.overrides)
    assert built["name"] == "hf" and built["params"].max_new_tokens == 16
    assert built["params"] == rl.rollout.generation
    assert (built["device"], built["dtype"], built["image_scale"]) == (
        rl.model.device,
        rl.model.dtype,
        rl.model.image_scale,
    )
    table = pipeline.nightly_table(
        {
            "evaluated": {"champion": {"version": 1, "mean": 2.0, "inference": paper.model_dump()}},
            "champion": 1,
            "recorded": 2.0,
        }
    )
    assert "max_new_tokens 4096" in table and "RL preset paper" in table

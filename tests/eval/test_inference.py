"""Evaluation answers with the training run's inference settings (Odysseus App. E.3), the
mario suite's episode counts and base row, and the agents behind them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from odyssey_core.eval import agents as agents_module
from odyssey_core.eval.agents import build_policy_agent, parse_agent_spec
from odyssey_core.eval.inference import InferenceSettings, checkpoint_inference, load_inference
from odyssey_core.eval.runner import section_jobs
from odyssey_core.eval.suites import load_suite
from odyssey_core.policy.base import GenerationParams
from odyssey_core.recipes.odysseus.settings import load_train_settings


class _Backend:
    system_prompt = ""

    def generate(self, observations: list[Any], params: GenerationParams) -> list[Any]:
        raise AssertionError("not played here")


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every backend ``make_policy`` is asked for: its name and arguments (nothing loads)."""
    calls: list[dict[str, Any]] = []

    def make_policy(name: str, **kwargs: Any) -> _Backend:
        calls.append({"name": name, **kwargs})
        return _Backend()

    monkeypatch.setattr(agents_module, "make_policy", make_policy)
    return calls


def test_inference_settings_are_the_training_presets() -> None:
    paper = load_inference("paper")
    s = load_train_settings("paper")
    assert paper.generation() == s.rollout.generation  # Table 9: 4096 tokens, T = 1, top-p 1
    assert (paper.image_scale, paper.device, paper.dtype) == (8, "cuda", "bfloat16")
    assert paper.backend_kwargs("hf") == {
        "image_scale": 8,
        "image_size": None,
        "dtype": "bfloat16",
        "device": "cuda",
        "attn_implementation": "sdpa",
    }
    # an API model has no device or dtype here, but sees frames at the same scale
    assert paper.backend_kwargs("openai") == {"image_scale": 8, "image_size": None}
    assert load_inference("compare").max_new_tokens == 1024  # Table 4


def test_a_checkpoint_carries_its_runs_settings(tmp_path: Path) -> None:
    settings = load_train_settings("tiny", {"model": {"image_scale": 2}})
    step = tmp_path / "checkpoints" / "step-000003"
    (step / "policy").mkdir(parents=True)
    (step / "policy" / "config.json").write_text(json.dumps({"model_type": "qwen3_vl"}))
    (step / "config.json").write_text(json.dumps(settings.model_dump(mode="json")))
    found = checkpoint_inference(step / "policy")
    assert found == InferenceSettings.from_training(settings, source=found.source)
    assert found.image_scale == 2 and str(step / "config.json") in found.source
    assert checkpoint_inference(step / "policy") == checkpoint_inference(step)
    assert checkpoint_inference(tmp_path) is None  # a plain model folder: nothing to say


def test_policy_agents_get_the_inference_settings(built: list[dict[str, Any]]) -> None:
    inference = load_inference("paper")
    agent = build_policy_agent(parse_agent_spec("hf:/m/ckpt"), "mario", inference=inference)
    assert agent.params == inference.generation() and not agent.api
    assert built[-1] == {
        "name": "hf",
        "model": "/m/ckpt",
        "game": "mario",
        **inference.backend_kwargs("hf"),
    }
    api = build_policy_agent(
        parse_agent_spec("openai:vlm@http://h/v1"), "mario", inference=inference
    )
    assert api.api and built[-1]["image_scale"] == 8 and "device" not in built[-1]
    # explicit parameters and the spec's own arguments win
    own = build_policy_agent(
        parse_agent_spec("hf:/m/x", image_scale=3),
        params=GenerationParams(max_new_tokens=5),
        inference=inference,
    )
    assert own.params.max_new_tokens == 5 and built[-1]["image_scale"] == 3


def test_labelled_agents_and_api_models() -> None:
    base = parse_agent_spec("base=hf:/models/Qwen3-VL-8B-Instruct")
    assert (base.label, base.name, base.kwargs["model"]) == (
        "base",
        "hf",
        "/models/Qwen3-VL-8B-Instruct",
    )
    assert parse_agent_spec("upper=expert").label == "upper"
    assert parse_agent_spec("hf:/a=b").kwargs["model"] == "/a=b"  # no label: a path with '='
    assert parse_agent_spec("openai:gpt@http://h/v1").api
    assert not parse_agent_spec("hf:/x").api and not parse_agent_spec("random").api


def test_the_mario_suite_plays_256_or_8_episodes_and_measures_against_the_base_vlm() -> None:
    suite = load_suite("mario")
    assert suite.base_agent == "base"  # Figure 6: relative to the base VLM, not a random agent
    assert suite.inference_from == "paper"
    start = next(s for s in suite.sections if s.kind == "from_start" and s.split == "train")
    open_jobs = section_jobs(suite, start)
    api_jobs = section_jobs(suite, start, api=True)
    assert len(open_jobs) == 256 * 5 and len(api_jobs) == 8 * 5  # App. E.3
    assert len(section_jobs(suite, start, runs=2, api=True)) == 2 * 5  # an explicit count wins
    odland = load_suite("odland")
    assert odland.section_runs(odland.sections[0], api=True) == odland.runs  # no api_runs


def test_evaluate_suite_gives_api_models_their_episode_count(
    monkeypatch: pytest.MonkeyPatch, built: list[dict[str, Any]]
) -> None:
    from odyssey_core.eval import runner

    suite = load_suite("mario", {"sections": [{"name": "s", "levels": ["1-1", "1-2"]}]})
    monkeypatch.setenv("ODYSSEY_SML_ROM", "/not/read/here.gb")
    played: dict[str, int] = {}
    monkeypatch.setattr(
        runner, "run_jobs", lambda jobs, env_fn, agent, **_: played.update({agent.label: len(jobs)})
    )
    agents = [
        build_policy_agent(parse_agent_spec("base=hf:/m/base")),
        build_policy_agent(parse_agent_spec("openai:vlm@http://h/v1")),
        parse_agent_spec("random"),
    ]
    runner.evaluate_suite(suite, agents)
    assert played == {"base": 512, "openai:vlm": 16, "random": 512}


def test_odyssey_eval_uses_the_training_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built: list[dict[str, Any]]
) -> None:
    from odyssey_core.eval import runner
    from odyssey_core.eval.cli import eval_command

    seen: list[Any] = []

    def evaluate_suite(suite: Any, agents: list[Any], **_: Any) -> Any:
        seen.extend(agents)
        raise SystemExit(0)  # the agents are what this test is about

    monkeypatch.setattr(runner, "evaluate_suite", evaluate_suite)
    settings = load_train_settings("tiny", {"rollout": {"generation": {"max_new_tokens": 77}}})
    step = tmp_path / "step-000001"
    (step / "policy").mkdir(parents=True)
    (step / "config.json").write_text(json.dumps(settings.model_dump(mode="json")))

    def run(*args: str) -> list[Any]:
        seen.clear()
        result = CliRunner().invoke(eval_command, ["mario", "--out", str(tmp_path / "o"), *args])
        assert result.exit_code == 0, result.output
        return list(seen)

    # the suite's inference_from (paper) for a model without a run config ...
    [base] = run("--agent", "base=hf:/models/base")
    assert base.params == load_inference("paper").generation()
    assert built[-1]["image_scale"] == 8 and built[-1]["device"] == "cuda"
    # ... the checkpoint's own run for an RL checkpoint, --train-preset above both
    [trained] = run("--agent", f"hf:{step / 'policy'}")
    assert trained.params.max_new_tokens == 77 and built[-1]["device"] == "cpu"
    [forced] = run("--agent", f"hf:{step / 'policy'}", "--train-preset", "compare")
    assert forced.params.max_new_tokens == 1024
    [changed] = run("--agent", "hf:/m", "--max-new-tokens", "9")
    assert changed.params.max_new_tokens == 9 and changed.params.temperature == 1.0
    assert "overridden" in changed.inference.source

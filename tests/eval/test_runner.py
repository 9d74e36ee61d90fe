"""The evaluation runner: parallel episodes, seeds, truncation, crashes, curated states,
and a policy agent on the tiny model."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest
import torch
from helpers_envs import FakeTurnEnv
from model_fixtures import tiny_model_dir, tiny_policy  # noqa: F401 (fixtures)

from odyssey_core.envs.base import Observation
from odyssey_core.eval.agents import PolicyAgent, build_policy_agent, parse_agent_spec
from odyssey_core.eval.runner import (
    EpisodeJob,
    curated_states_for,
    derive_seed,
    evaluate_suite,
    frame_hash,
    run_jobs,
)
from odyssey_core.eval.scenarios import ScenarioError, expert_state_after, write_scenario_state
from odyssey_core.eval.suites import (
    EvalSuite,
    load_curated_states,
    load_suite,
    make_curated_states,
    save_curated_states,
)
from odyssey_core.policy.base import Generation, GenerationParams, PolicyBackend
from odyssey_core.rollout.collector import generate_seed

torch.set_num_threads(1)


def test_agent_specs_parse() -> None:
    assert parse_agent_spec("expert").kind == "env"
    spec = parse_agent_spec("hf:/ckpt/step-10/")
    assert (spec.label, spec.name, spec.kwargs["model"]) == ("hf:step-10", "hf", "/ckpt/step-10/")
    spec = parse_agent_spec("openai:gpt-x@http://127.0.0.1:8000/v1")
    assert spec.kwargs == {"model": "gpt-x", "base_url": "http://127.0.0.1:8000/v1"}
    with pytest.raises(ValueError):
        parse_agent_spec("nobody")


def test_suite_presets_load() -> None:
    suite = load_suite("odland")
    kinds = {s.name: (s.kind, s.split) for s in suite.sections}
    assert kinds["unseen"] == ("curated", "heldout")
    assert suite.section_game(suite.sections[-1]) == "mario"
    assert load_suite("mario").sections[-1].game == "odland"
    with pytest.raises(ValueError, match="at least 10"):
        EvalSuite.model_validate(
            {
                "name": "x",
                "sections": [
                    {"name": "c", "kind": "curated", "levels": ["1-1"], "states": {"count": 3}}
                ],
            }
        )


def test_expert_and_random_from_start_in_subprocesses(odland_rom, monkeypatch) -> None:
    monkeypatch.delenv("ODYSSEY_SML_ROM", raising=False)
    suite = EvalSuite.model_validate(
        {
            "name": "tiny",
            "runs": 2,
            "max_turns": 4,
            "workers": 2,
            "videos": 1,
            "base_agent": "random",
            "sections": [
                {"name": "start", "levels": ["1-1"]},
                {"name": "other", "game": "mario", "split": "other_game", "levels": ["1-1"]},
            ],
        }
    )
    agents = [parse_agent_spec("expert", max_nodes=25), parse_agent_spec("random")]
    results = evaluate_suite(suite, agents)
    start, other = results.sections
    assert other.skipped and "ODYSSEY_SML_ROM" in other.skipped
    for label in ("expert", "random"):
        records = start.records[label]
        assert len(records) == 2
        for r in records:
            assert r.error is None and r.turns == 4
            # ended by the turn limit: truncated, and never a success
            assert r.truncated and not r.goal_reached and not r.success
            assert r.start == "start" and r.env_id == "odland-1-1"
    seeds = [r.seed for r in start.records["expert"]]
    assert seeds == [r.seed for r in start.records["random"]] and len(set(seeds)) == 2
    assert start.records["expert"][0].frames  # the video episode kept its frames
    table = start.table()
    cell = table.rows["expert"]["odland-1-1"]
    assert cell.n == 2 and cell.successes == 0 and cell.truncated == 2
    assert cell.mean > table.rows["random"]["odland-1-1"].mean
    assert table.max_progress["odland-1-1"] and table.improvement("expert") > 0
    assert "eval/start/expert/average/rel_improvement" in results.metrics()


class ScriptedBackend(PolicyBackend):
    """Answers "right", except that on call ``bad_call`` the first env gets ``bad_text``."""

    def __init__(self, bad_call: int, bad_text: str) -> None:
        self.calls = 0
        self.bad_call, self.bad_text = bad_call, bad_text

    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        self.calls += 1
        texts = ["right"] * len(observations)
        if self.calls == self.bad_call:
            texts[0] = self.bad_text
        return [Generation(t, [], [], [], "stop") for t in texts]


@pytest.mark.parametrize("bad_text", ["boom", "exit"])  # the env raises / the worker dies
def test_a_crashing_env_is_an_error_not_zero_progress(bad_text: str) -> None:
    jobs = [EpisodeJob("s", "1-1", run) for run in range(3)]
    agent = PolicyAgent(ScriptedBackend(bad_call=2, bad_text=bad_text), "scripted")
    env_fn = functools.partial(FakeTurnEnv, "fake", episode_len=3)
    seen: list[int] = []
    records = run_jobs(
        jobs, env_fn, agent, workers=2, timeout=30, on_episode=lambda r: seen.append(r.run)
    )
    errors = [r for r in records if r.error]
    assert len(errors) == 1 and len(records) == 3
    assert sorted(seen) == [0, 1, 2]  # every job is reported once, errors included
    assert ("boom" in errors[0].error) if bad_text == "boom" else ("died" in errors[0].error)
    finished = [r for r in records if r.error is None]
    assert all(r.turns == 3 and not r.success for r in finished)
    assert all(len(r.generate_seeds) == 3 for r in finished)


class FailingBackend(ScriptedBackend):
    """Answers "right", but raises on call ``bad_call`` (a dead API)."""

    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        if self.calls + 1 == self.bad_call:
            self.calls += 1
            raise ConnectionError("the API is down")
        return super().generate(observations, params)


def test_a_failing_generate_ends_only_the_running_jobs() -> None:
    jobs = [EpisodeJob("s", "1-1", run) for run in range(3)]
    agent = PolicyAgent(FailingBackend(bad_call=2, bad_text="right"), "flaky")
    env_fn = functools.partial(FakeTurnEnv, "fake", episode_len=3)
    records = run_jobs(jobs, env_fn, agent, workers=2, vector="sync")
    assert [r.run for r in records] == [0, 1, 2]
    for r in records[:2]:  # running during the failed call
        assert r.error == "generate failed: ConnectionError: the API is down" and r.turns == 1
    assert records[2].error is None and records[2].turns == 3  # played after it


def test_when_every_worker_died_a_fresh_vector_env_plays_the_rest() -> None:
    jobs = [EpisodeJob("s", "1-1", run) for run in range(3)]
    agent = PolicyAgent(ScriptedBackend(bad_call=2, bad_text="exit"), "scripted")
    env_fn = functools.partial(FakeTurnEnv, "fake", episode_len=3)
    seen: list[int] = []
    records = run_jobs(
        jobs, env_fn, agent, workers=1, timeout=30, on_episode=lambda r: seen.append(r.run)
    )
    assert seen == [0, 1, 2]
    assert records[0].error and "died" in records[0].error
    assert all(r.error is None and r.turns == 3 for r in records[1:])
    assert [r.seed for r in records] == [derive_seed(0, 1, k) for k in range(3)]


def test_seeds_are_per_job_and_per_generate_call() -> None:
    jobs = [EpisodeJob("s", "1-1", run) for run in range(3)]
    env_fn = functools.partial(FakeTurnEnv, "fake", episode_len=2)
    agent = PolicyAgent(ScriptedBackend(bad_call=0, bad_text=""), "scripted")
    (single,) = run_jobs(jobs[:1], env_fn, agent, workers=1, vector="sync", seed=7)
    assert single.seed == derive_seed(7, 1, 0)
    assert single.generate_seeds == [generate_seed(7, t) for t in range(2)]
    # a job keeps its env seed however many workers play: the first frame shows it
    for workers in (1, 3):
        records = run_jobs(jobs, env_fn, agent, workers=workers, vector="sync", seed=7)
        assert [r.seed for r in records] == [derive_seed(7, 1, k) for k in range(3)]
        for r in records:
            first, _ = FakeTurnEnv("fake", episode_len=2).reset(seed=r.seed)
            assert r.turn_log[0].frame_hash == frame_hash(first.image)
            assert r.turn_log[0].text == "right" and r.turns == 2 and not r.truncated


def test_env_driven_agents_get_no_generate_seeds() -> None:
    jobs = [EpisodeJob("s", "1-1", run, record_video=run == 0) for run in range(2)]
    env_fn = functools.partial(FakeTurnEnv, "fake", episode_len=3)
    records = run_jobs(jobs, env_fn, parse_agent_spec("random"), workers=2, vector="sync")
    assert all(r.error is None and r.turns == 3 and not r.generate_seeds for r in records)
    assert all(t.text is None for r in records for t in r.turn_log)
    assert len(records[0].frames) == 4 and not records[1].frames
    assert records[0].env_id == "fake"


def test_curated_states_progress_both_ways(odland_rom, tmp_path) -> None:
    states = make_curated_states("1-1", 2, expert_turns=6, expert_max_nodes=20)
    assert len(states) == 2 and states[0].progress < states[1].progress
    save_curated_states(states, tmp_path)
    loaded = load_curated_states(tmp_path, "odland-1-1")
    assert [s.progress for s in loaded] == [s.progress for s in states]
    suite = EvalSuite.model_validate(
        {
            "name": "curated",
            "max_turns": 3,
            "workers": 2,
            "videos": 0,
            "sections": [
                {
                    "name": "off",
                    "kind": "curated",
                    "levels": ["1-1"],
                    "states": {"count": 2, "allow_fewer": True, "states_dir": str(tmp_path)},
                }
            ],
        }
    )
    results = evaluate_suite(suite, [parse_agent_spec("expert", max_nodes=20)])
    records = results.sections[0].records["expert"]
    assert [r.start for r in records] == [s.name for s in states]
    for record, state in zip(records, states, strict=True):
        assert record.start_progress == state.progress > 16  # from the state, not the start
        assert record.progress > record.start_progress  # absolute, from the level start
        assert record.gained == record.progress - record.start_progress
    cell = results.sections[0].table().rows["expert"]["odland-1-1"]
    assert cell.gained_mean < cell.mean


def test_the_compare_suite_checks_its_states_against_the_scenario(odland_rom, tmp_path) -> None:
    suite = load_suite("compare")
    assert suite.sections[0].states.scenarios == {"1-3": "tall-pipe-two-walkers"}
    (packaged,) = curated_states_for(suite, suite.sections[0])["1-3"]
    assert packaged.name == "tall-pipe-two-walkers"
    # a state of the right level but the wrong place stops the suite before any episode
    write_scenario_state(expert_state_after("odland-1-3", 2), tmp_path / "odland-1-3" / "a.state")
    section = suite.sections[0]
    elsewhere = section.states.model_copy(update={"states_dir": tmp_path})
    moved = suite.model_copy(
        update={"videos": 0, "sections": [section.model_copy(update={"states": elsewhere})]}
    )
    with pytest.raises(ScenarioError, match=r"tall-pipe-two-walkers: .*a\.state: fact 'position'"):
        evaluate_suite(moved, [parse_agent_spec("random")])
    # a scenario of another level, or of a level the section does not play, fails on load
    states = {**section.states.model_dump(), "scenarios": {"1-1": "tall-pipe-two-walkers"}}
    for levels, error in ((["1-1"], "not a scenario of odland-1-1"), (["1-3"], "does not play")):
        with pytest.raises(ValueError, match=error):
            load_suite(
                "compare",
                {
                    "sections": [
                        {"name": "s", "kind": "curated", "levels": levels, "states": states}
                    ]
                },
            )


def test_hf_agent_plays_two_turns(odland_rom, tiny_policy) -> None:  # noqa: F811
    spec = parse_agent_spec("hf:tiny")
    agent = build_policy_agent(spec, params=GenerationParams(max_new_tokens=6), backend=tiny_policy)
    jobs = [EpisodeJob("s", "1-1", 0, record_video=True)]
    env_fn = functools.partial(make_odland, max_turns=2)
    (record,) = run_jobs(jobs, env_fn, agent, workers=1, seed=3)
    assert record.error is None and record.turns == 2 and record.truncated
    assert len(record.turn_log) == 2 and all(t.text is not None for t in record.turn_log)
    assert len(record.generate_seeds) == 2 and len(record.frames) == 3


def make_odland(max_turns: int):
    from odyssey_core.envs import make_env

    return make_env("odland-1-1", max_turns=max_turns)


def test_openai_agent_plays_against_an_openai_compatible_server(
    odland_rom,
    tiny_policy,  # noqa: F811
    monkeypatch,
) -> None:
    """A frontier-model row goes through the same runner: here the endpoint is the project's
    own OpenAI-compatible server over HTTP."""
    from odyssey_core.serve.app import ServerThread, create_app

    monkeypatch.setenv("ODYSSEY_TEST_KEY", "k")
    app = create_app(tiny_policy, "tiny", api_key="k", max_batch_size=4, batch_wait_ms=5)
    with ServerThread(app) as server:
        spec = parse_agent_spec(f"openai:tiny@{server.url}/v1")
        spec.kwargs["api_key_env"] = "ODYSSEY_TEST_KEY"
        agent = build_policy_agent(spec, params=GenerationParams(max_new_tokens=6))
        jobs = [EpisodeJob("s", "1-1", 0)]
        env_fn = functools.partial(make_odland, max_turns=2)
        (record,) = run_jobs(jobs, env_fn, agent, workers=1, seed=3)
    assert record.error is None and record.turns == 2 and record.truncated
    assert all(t.text is not None for t in record.turn_log)

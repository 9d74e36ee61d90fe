"""Teachers: the programmatic one (offline) and the OpenAI-compatible one (over HTTP)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import model_fixtures
import pytest
from helpers_chat import ChatReply, ChatRequest, FakeChatServer

from odyssey_core.data.sampling import SampledFrame, SamplingConfig, sample_frames
from odyssey_core.data.teachers import (
    TEACHERS,
    OpenAITeacher,
    ProgrammaticTeacher,
    TeacherConfig,
    TeacherError,
    TeacherRefusal,
    TeacherSettingsError,
    annotate_frames,
    is_reasoning_model,
    make_teacher,
    probe_teacher,
)
from odyssey_core.data.walkthroughs import RecordConfig, record_walkthrough
from odyssey_core.protocol import format_response, parse_response

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    root = tmp_path_factory.mktemp("teach")
    config = RecordConfig(agent="expert", agent_kwargs={"max_nodes": 60}, max_turns=24)
    walk = record_walkthrough(config, "1-1", root / "walk")
    frames = sample_frames(
        [walk], root / "samples", SamplingConfig(frames_per_level=12, show_progress=False)
    )
    return frames, root / "samples"


def test_registry() -> None:
    assert {"programmatic", "openai"} <= set(TEACHERS.names())
    assert isinstance(make_teacher(TeacherConfig()), ProgrammaticTeacher)


def test_programmatic_teacher_is_deterministic_varied_and_parsable(sampled) -> None:
    frames, root = sampled
    teacher = ProgrammaticTeacher()
    result = teacher.annotate(frames, root)
    assert len(result.annotations) == len(frames) >= 6 and not result.failures
    again = ProgrammaticTeacher().annotate(frames, root)
    assert [a.response for a in again.annotations] == [a.response for a in result.annotations]
    openings = Counter()
    for frame, annotation in zip(frames, result.annotations, strict=True):
        parsed = parse_response(annotation.response)
        assert parsed.valid and not parsed.warnings
        assert list(parsed.buttons) == annotation.buttons == frame.state_dict()["buttons_next"]
        openings[" ".join(parsed.perception.split()[:3])] += 1
    assert len(openings) >= 2  # several phrasings, not one template


def test_programmatic_perception_mentions_objects_in_tiles() -> None:
    state = {
        "player_x": 100,
        "screen_x": 40,
        "player_y": 96,
        "on_ground": False,
        "velocity_y": -3,
        "lives": 3,
        "buttons_next": ["a", "right"],
        "objects": json.dumps(
            [{"kind": "gap", "x": 140, "y": 24}, {"kind": "walker", "x": 84, "y": 96}]
        ),
    }
    frame = SampledFrame(
        "ab" * 32,
        "frames/x.png",
        "0" * 16,
        "odland",
        "1-1",
        "record:expert",
        "w",
        0,
        0.0,
        json.dumps(state),
    )
    text = ProgrammaticTeacher().annotate_one(frame).response
    parsed = parse_response(text)
    assert "5 tiles" in parsed.perception and "3 tiles" in parsed.perception  # gap distance/width
    assert "2 tiles" in parsed.perception  # the walker behind
    assert any(w in parsed.perception for w in ("air", "jump", "falling"))
    assert parsed.buttons == ("a", "right")


def test_programmatic_refuses_frames_without_sidecar() -> None:
    frame = SampledFrame(
        "cd" * 32, "frames/x.png", "0" * 16, "mario", "1-1", "import:v.mp4", "v", 3, 0.3
    )
    with pytest.raises(TeacherRefusal, match="sidecar"):
        ProgrammaticTeacher().annotate([frame], ".")


# ----------------------------------------------------------------------------- a stub server
class _Stub(FakeChatServer):
    """An OpenAI-compatible endpoint that fails on purpose: per frame, the first request gets
    a 429, the second a 500, the third hangs past the client timeout, then it answers."""

    def __init__(self, faults: tuple[str, ...] = ("429", "500", "timeout")) -> None:
        super().__init__()
        self.faults = faults

    def answer(self, request: ChatRequest) -> ChatReply:
        attempt = request.attempt
        fault = self.faults[attempt - 1] if attempt <= len(self.faults) else "ok"
        if fault == "timeout":
            return ChatReply(status=500, delay_s=1.0)
        if fault in ("429", "500"):
            return ChatReply(status=int(fault))
        text = format_response("I see the hero.", "Run right.", ("b", "right"))
        return ChatReply(text=text, prompt_tokens=1000, completion_tokens=100)


def _teacher(url: str, cache: Path, **options) -> OpenAITeacher:
    settings = {
        "model": "stub-vlm",
        "base_url": url,
        "api_key_env": None,
        "timeout": 0.5,
        "concurrency": 4,
        "initial_backoff": 0.01,
        "max_backoff": 0.05,
        "cache_dir": cache,
        "price_prompt_per_1k": 0.01,
        "price_completion_per_1k": 0.03,
        "show_progress": False,
        **options,
    }
    return OpenAITeacher(game="odland", **settings)


def test_openai_teacher_retries_caches_and_counts_cost(sampled, tmp_path: Path) -> None:
    frames, root = sampled
    frames = frames[:5]
    with _Stub() as stub:
        rows, metrics = annotate_frames(
            _teacher(stub.url, tmp_path / "cache"), frames, root, tmp_path
        )
        assert len(rows) == 5 and stub.requests == 5 * 4  # 429, 500, timeout, then the answer
        assert metrics["requests"] == 5 and metrics["http_retries"] == 15
        assert metrics["prompt_tokens"] == 5000 and metrics["completion_tokens"] == 500
        assert metrics["cost_usd"] == pytest.approx(5 * (0.01 + 0.003))
        assert all(
            r["buttons"] == ["b", "right"] and r["teacher"] == "openai:stub-vlm" for r in rows
        )
        # A rerun pays nothing: every answer comes from the cache.
        rows2, metrics2 = annotate_frames(
            _teacher(stub.url, tmp_path / "cache"), frames, root, tmp_path
        )
        assert stub.requests == 20 and metrics2["cache_hits"] == 5 and metrics2["cost_usd"] == 0
        assert [r["response"] for r in rows2] == [r["response"] for r in rows]
        # Another model or other parameters are different cache keys.
        _, metrics3 = annotate_frames(
            _teacher(stub.url, tmp_path / "cache", temperature=0.7), frames[:1], root, tmp_path
        )
        assert metrics3["requests"] == 1
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_openai_teacher_survives_a_crash_and_exhausted_retries(sampled, tmp_path: Path) -> None:
    frames, root = sampled
    frames = frames[:6]
    with _Stub(faults=()) as stub:
        teacher = _teacher(stub.url, tmp_path / "cache", concurrency=1)
        original = teacher.policy.create_with_retries
        calls = {"n": 0}

        def crashing(messages, kwargs):
            calls["n"] += 1
            if calls["n"] > 3:
                raise KeyboardInterrupt("simulated crash")
            return original(messages, kwargs)

        teacher.policy.create_with_retries = crashing
        with pytest.raises(KeyboardInterrupt):
            annotate_frames(teacher, frames, root, tmp_path)
        assert stub.requests == 3
        _, metrics = annotate_frames(_teacher(stub.url, tmp_path / "cache"), frames, root, tmp_path)
        assert metrics["cache_hits"] == 3 and metrics["requests"] == 3 and stub.requests == 6
        assert max(stub.hits.values()) == 1  # nothing was asked twice
    with _Stub(faults=("500",) * 10) as stub:
        teacher = _teacher(stub.url, tmp_path / "cache2", max_retries=1)
        with pytest.raises(TeacherError, match="2 of 2 frames") as failed:
            annotate_frames(teacher, frames[:2], root, tmp_path / "failed")
        assert stub.requests == 4
    # the HTTP error rides along as the cause: the pipeline's retry rule calls a 500 transient
    from tasks.common import is_transient_error

    assert failed.value.__cause__ is not None and is_transient_error(failed.value)


@pytest.mark.slow  # builds the tiny checkpoint (shared with the serve tests when run together)
def test_openai_teacher_against_the_project_server(sampled, tiny_policy, tmp_path: Path) -> None:
    from odyssey_core.serve.app import ServerThread, create_app

    frames, root = sampled
    app = create_app(tiny_policy, "tiny", max_batch_size=4, batch_wait_ms=10)
    with ServerThread(app) as server:
        teacher = _teacher(
            f"{server.url}/v1", tmp_path / "cache", model="tiny", timeout=60, max_tokens=16
        )
        rows, metrics = annotate_frames(teacher, frames[:2], root, tmp_path, allow_failures=True)
        assert not metrics["failures"], metrics["failures"]
        assert len(rows) == 2 and metrics["requests"] == 2 and metrics["completion_tokens"] > 0
        _, again = annotate_frames(
            _teacher(
                f"{server.url}/v1", tmp_path / "cache", model="tiny", timeout=60, max_tokens=16
            ),
            frames[:2],
            root,
            tmp_path,
        )
        assert again["cache_hits"] == 2 and again["requests"] == 0


# ---------------------------------------------------------------- a reasoning model (like o3)
#: what o3 answers when a request sets a sampling parameter it does not support
O3_REFUSAL = "Unsupported parameter: '{name}' is not supported with this model."
#: completion tokens the fake model spends reasoning before it writes its answer
REASONING_TOKENS = 2000


class _ReasoningStub(FakeChatServer):
    """An OpenAI-compatible endpoint that behaves like o3: it refuses ``temperature``,
    ``top_p`` and ``max_tokens`` with HTTP 400, and spends ``REASONING_TOKENS`` hidden tokens
    before answering, so a smaller ``max_completion_tokens`` ends with no text and finish
    reason ``length``. It records every request body."""

    def answer(self, request: ChatRequest) -> ChatReply:
        body = request.body
        for name in ("temperature", "top_p", "max_tokens"):
            if name in body:
                message = O3_REFUSAL.format(name=name)
                if name == "max_tokens":
                    message += " Use 'max_completion_tokens' instead."
                error = {"message": message, "type": "invalid_request_error", "param": name}
                return ChatReply(status=400, error=error)
        budget = int(body.get("max_completion_tokens", 10**6))
        cut = budget < REASONING_TOKENS + 50
        return ChatReply(
            text="" if cut else format_response("A hero.", "Go right.", ("right",)),
            finish_reason="length" if cut else "stop",
            prompt_tokens=900,
            completion_tokens=budget if cut else REASONING_TOKENS + 50,
        )


def test_a_reasoning_model_is_sent_no_temperature_and_a_completion_budget(
    sampled, tmp_path: Path
) -> None:
    frames, root = sampled
    with _ReasoningStub() as stub:
        teacher = _teacher(stub.url, tmp_path / "cache", model="o3", max_tokens=8192)
        assert teacher.probe()["finish_reason"] == "stop"
        rows, metrics = annotate_frames(teacher, frames[:3], root, tmp_path)
    assert len(rows) == 3 and metrics["requests"] == 3 and not metrics["failures"]
    assert all(r["buttons"] == ["right"] for r in rows)
    assert len(stub.bodies) == 4  # the probe, then one request per frame
    for body in stub.bodies:
        assert body["max_completion_tokens"] == 8192 and body["seed"] == 0
        assert not {"temperature", "top_p", "max_tokens"} & set(body)


def test_a_reasoning_model_with_the_old_defaults_fails_naming_the_budget(tmp_path: Path) -> None:
    assert is_reasoning_model("o3") and is_reasoning_model("openai/o4-mini")
    assert is_reasoning_model("gpt-5") and not is_reasoning_model("gpt-4o")
    with pytest.raises(ValueError, match=r"teacher.options.max_tokens 512 .* at least 4096"):
        _teacher("http://127.0.0.1:9/v1", tmp_path / "cache", model="o3")
    with pytest.raises(ValueError, match="max_tokens_field to max_completion_tokens"):
        _teacher(
            "http://127.0.0.1:9/v1",
            tmp_path / "cache",
            model="o3",
            max_tokens=8192,
            max_tokens_field="max_tokens",
        )
    # a name that does not look like one: the teacher asks as for any other model
    plain = _teacher("http://127.0.0.1:9/v1", tmp_path / "cache", model="gpt-4o")
    assert plain.settings.request_kwargs() == {
        "max_tokens": 512,
        "temperature": 0.2,
        "top_p": 1.0,
        "seed": 0,
    }


def test_the_probe_names_the_setting_a_reasoning_server_refuses(tmp_path: Path) -> None:
    """A served name that hides the model (a gateway alias): only the probe can tell."""
    alias = {"model": "teacher-alias"}
    with _ReasoningStub() as stub:
        steps = [
            ({}, "teacher.options.temperature: null"),
            ({"temperature": None, "top_p": None}, "max_tokens_field: max_completion_tokens"),
            (
                {"temperature": None, "top_p": None, "max_tokens_field": "max_completion_tokens"},
                r"cut off at teacher.options.max_tokens 512 .* at least 4096",
            ),
        ]
        for options, named in steps:
            teacher = _teacher(stub.url, tmp_path / "cache", **alias, **options)
            with pytest.raises(TeacherSettingsError, match=named):
                teacher.probe()
        assert len(stub.bodies) == 3  # one request per probe, no retries of a refusal
        fixed = _teacher(stub.url, tmp_path / "cache", **alias, reasoning=True, max_tokens=4096)
        assert fixed.probe()["text"]


def test_curation_probes_the_teacher_before_recording(tmp_path: Path) -> None:
    from odyssey_core.data.cli import curate, load_curate_config

    with _ReasoningStub() as stub:
        options = {"model": "teacher-alias", "base_url": stub.url, "api_key_env": None}
        config = load_curate_config("tiny", {"teacher": {"name": "openai", "options": options}})
        with pytest.raises(TeacherSettingsError, match=r"teacher\.options\.temperature"):
            curate(config, tmp_path / "out")
        assert len(stub.bodies) == 1
    assert not (tmp_path / "out" / "walkthroughs").exists()  # nothing was recorded
    assert probe_teacher(load_curate_config("tiny").teacher) is None  # no requests to make


def test_the_early_check_names_a_budget_too_small_for_the_teachers_model() -> None:
    from odyssey_core.data.cli import curate_problems, load_curate_config

    environ = {
        "ODYSSEY_TEACHER_MODEL": "o3",
        "ODYSSEY_TEACHER_BASE_URL": "http://127.0.0.1:9/v1",
        "ODYSSEY_TEACHER_API_KEY": "k",
    }
    assert curate_problems(load_curate_config("paper"), environ) == []
    small = load_curate_config("paper", {"teacher": {"options": {"max_tokens": 512}}})
    (problem,) = curate_problems(small, environ)
    assert "'o3' is a reasoning model" in problem and "at least 4096" in problem

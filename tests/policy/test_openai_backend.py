"""OpenAIPolicy against a scripted local HTTP server (retries, errors, concurrency) and, end
to end, against `odyssey serve` on the tiny model."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import model_fixtures
import numpy as np
import pytest
from model_fixtures import make_observations
from PIL import Image

from odyssey_core.models.processor import prepare_frame
from odyssey_core.policy import BACKENDS, GenerationParams, make_policy
from odyssey_core.policy.openai_backend import (
    OpenAIBackendError,
    OpenAIPolicy,
    RetrySettings,
    parse_retry_after,
)
from odyssey_core.protocol import get_system_prompt, parse_response

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy

FAST = RetrySettings(max_retries=4, initial_backoff=0.001, max_backoff=0.01, max_total_wait=5.0)


class FakeAPI:
    """A chat-completions server on 127.0.0.1 whose next answers are scripted.

    ``script`` holds one action per attempt: ``(status, headers)`` for an error answer or
    ``("sleep", seconds)`` to answer late; when empty, requests succeed after ``delay``.
    """

    def __init__(self, api_key: str | None = None, delay: float = 0.0) -> None:
        self.api_key = api_key
        self.delay = delay
        self.script: deque[tuple[Any, Any]] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.attempts = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with api.lock:
                    api.attempts += 1
                    api.bodies.append(body)
                    api.in_flight += 1
                    api.max_in_flight = max(api.max_in_flight, api.in_flight)
                    action = api.script.popleft() if api.script else None
                try:
                    self._answer(body, action)
                finally:
                    with api.lock:
                        api.in_flight -= 1

            def _answer(self, body: dict[str, Any], action: Any) -> None:
                if api.api_key and self.headers.get("Authorization") != f"Bearer {api.api_key}":
                    return self._send(401, {"error": {"message": "Incorrect API key"}})
                if action is not None and action[0] == "sleep":
                    time.sleep(action[1])
                elif action is not None:
                    status, headers = action
                    return self._send(status, {"error": {"message": f"scripted {status}"}}, headers)
                time.sleep(api.delay)
                self._send(200, _completion(body))

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    text = "<answer>['right']</answer>"
    logprobs = None
    if body.get("logprobs"):
        content = [{"token": c, "logprob": -0.5, "bytes": None, "top_logprobs": []} for c in "ab"]
        logprobs = {"content": content}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "logprobs": logprobs,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


def _policy(api: FakeAPI, **kwargs: Any) -> OpenAIPolicy:
    settings = {"api_key": "k", "retry": FAST, "timeout": 5.0, **kwargs}
    return OpenAIPolicy("test-model", api.url, **settings)


def test_registered_and_request_shape() -> None:
    assert BACKENDS.get("openai") is OpenAIPolicy
    observations = make_observations(["first", "second"], shape=(36, 40))
    with FakeAPI() as api:
        policy = make_policy(
            "openai", model="test-model", base_url=api.url, api_key="k", game="mario",
            image_scale=2, logprobs=True,
        )  # fmt: skip
        params = GenerationParams(
            temperature=0.7, top_p=0.9, max_new_tokens=7, stop=("</answer>",), seed=3
        )
        gens = policy.generate(observations, params)
        policy.generate(observations[:1], params.model_copy(update={"repetition_penalty": 1.2}))

    first, second, third = api.bodies
    first, second = sorted([first, second], key=lambda b: b["seed"])
    assert [first["seed"], second["seed"]] == [3, 4]  # seed + index, like HFPolicy
    assert first["temperature"] == 0.7 and first["top_p"] == 0.9 and first["max_tokens"] == 7
    assert first["stop"] == ["</answer>"] and first["logprobs"] is True
    assert "repetition_penalty" not in first and third["repetition_penalty"] == 1.2
    system, user = first["messages"]
    assert system == {"role": "system", "content": get_system_prompt("mario")}
    image_part, text_part = user["content"]
    assert text_part == {"type": "text", "text": "first"}
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    sent = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    expected = np.asarray(prepare_frame(observations[0].image, image_scale=2))
    assert sent.shape == (72, 80, 3) and np.array_equal(sent, expected)

    assert parse_response(gens[0].text).buttons == ("right",)
    assert gens[0].logprobs == [-0.5, -0.5]
    assert gens[0].prompt_ids == [] and gens[0].finish_reason == "stop"
    assert policy.usage == {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36}
    assert policy.metrics()["requests"] == 3 and policy.metrics()["retries"] == 0


def test_retries_429_with_retry_after_then_500_then_timeout() -> None:
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with FakeAPI() as api:
        api.script.extend(
            [(429, {"Retry-After": "0.2"}), (500, {}), ("sleep", 1.5), (503, {"Retry-After": "0"})]
        )
        policy = _policy(api, timeout=0.3, sleep=sleep)
        [gen] = policy.generate(make_observations(["go"]))
    assert gen.text == "<answer>['right']</answer>"
    assert api.attempts == 5
    assert waits[0] == pytest.approx(0.2)  # the server's Retry-After, not our tiny backoff
    assert waits[1] < 0.05 and waits[2] < 0.05 and waits[3] == 0.0
    assert policy.metrics()["retries"] == 4 and policy.metrics()["failures"] == 0


def test_gives_up_after_max_retries_and_max_total_wait() -> None:
    with FakeAPI() as api:
        api.script.extend([(503, {})] * 10)
        policy = _policy(api, retry=RetrySettings(max_retries=2, initial_backoff=0.001))
        with pytest.raises(OpenAIBackendError, match="giving up after 3 attempts") as info:
            policy.generate(make_observations(["go"]))
        assert api.attempts == 3 and info.value.status_code == 503

        api.script.clear()
        api.script.append((429, {"Retry-After": "3600"}))  # longer than the wait budget
        api.attempts = 0
        with pytest.raises(OpenAIBackendError, match="giving up"):
            _policy(api).generate(make_observations(["go"]))
        assert api.attempts == 1


def test_connection_errors_are_retried() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    policy = OpenAIPolicy(
        "m", f"http://127.0.0.1:{port}/v1", api_key="k",
        retry=RetrySettings(max_retries=2, initial_backoff=0.001),
    )  # fmt: skip
    with pytest.raises(OpenAIBackendError, match="connection error"):
        policy.generate(make_observations(["go"]))
    assert policy.metrics()["attempts"] == 3


def test_401_and_404_fail_at_once_with_advice(monkeypatch) -> None:
    monkeypatch.delenv("ODYSSEY_TEST_KEY", raising=False)
    with FakeAPI(api_key="right-key") as api:
        policy = OpenAIPolicy("test-model", api.url, api_key="wrong-key", retry=FAST)
        with pytest.raises(OpenAIBackendError, match="rejected the API key") as info:
            policy.generate(make_observations(["go"]))
        assert info.value.status_code == 401 and api.attempts == 1
        assert "wrong-key" not in str(info.value) and "wrong-key" not in repr(policy)

        keyless = OpenAIPolicy("test-model", api.url, api_key_env="ODYSSEY_TEST_KEY", retry=FAST)
        with pytest.raises(OpenAIBackendError, match=r"\$ODYSSEY_TEST_KEY"):
            keyless.generate(make_observations(["go"]))

        # The key from the named environment variable is used.
        monkeypatch.setenv("ODYSSEY_TEST_KEY", "right-key")
        from_env = OpenAIPolicy("test-model", api.url, api_key_env="ODYSSEY_TEST_KEY")
        assert from_env.generate(make_observations(["go"]))[0].text

    with FakeAPI() as api:
        api.script.append((404, {}))
        with pytest.raises(OpenAIBackendError, match="model name") as info:
            _policy(api).generate(make_observations(["go"]))
        assert info.value.status_code == 404 and api.attempts == 1 and "/v1" in str(info.value)


def test_concurrency_limit_is_respected() -> None:
    with FakeAPI(delay=0.15) as api:
        policy = _policy(api, concurrency=3)
        gens = policy.generate(make_observations([f"t{i}" for i in range(8)]))
    assert len(gens) == 8 and api.attempts == 8
    assert 2 <= api.max_in_flight <= 3
    texts = [body["messages"][1]["content"][1]["text"] for body in api.bodies]
    assert sorted(texts) == sorted(f"t{i}" for i in range(8))


def test_parse_retry_after() -> None:
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    now = 1_700_000_000.0  # 2023-11-14 22:13:20 GMT
    date = "Tue, 14 Nov 2023 22:13:50 GMT"
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": "Mon, 01 Jan 2001 00:00:00 GMT"}) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_end_to_end_against_odyssey_serve(tiny_policy) -> None:
    from odyssey_core.serve.app import ServerThread, create_app

    observations = make_observations(["Level 1-1. Go right.", "Level 1-2."], seed=9)
    params = GenerationParams(temperature=0, max_new_tokens=10)
    local = tiny_policy.generate(observations, params)
    app = create_app(tiny_policy, "tiny", api_key="serve-key")
    with ServerThread(app) as server:
        remote = OpenAIPolicy(
            "tiny", server.url + "/v1", api_key="serve-key", logprobs=True,
            return_token_ids=True, retry=FAST,
        )  # fmt: skip
        gens = remote.generate(observations, params)
    for got, want in zip(gens, local, strict=True):
        assert got.text == want.text
        assert got.prompt_ids == want.prompt_ids and got.response_ids == want.response_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    completion = sum(len(g.response_ids) for g in local)
    assert remote.usage["completion_tokens"] == completion
    assert remote.usage["prompt_tokens"] == sum(len(g.prompt_ids) for g in local)

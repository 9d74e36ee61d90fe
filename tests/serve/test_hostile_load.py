"""A real `odyssey serve` under load it cannot take: a full queue is a 503 with
``Retry-After``, a request past its deadline is a 504 and its work is dropped, so is the
work of a client that left, and SIGTERM stops the server while it generates."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import model_fixtures
import pytest

from serve.helpers_serve import TIMEOUT_S, chat_body, odyssey_serve, post_chat

tiny_model_dir = model_fixtures.tiny_model_dir

pytestmark = pytest.mark.slow  # `odyssey serve` child processes

DEADLINE_S = 4
# 16 greedy answers of 4096 tokens (greedy: the tiny model then never ends its turn early),
# one after another on a one-sequence server: minutes of work on a CPU.
LONG = {"max_tokens": 4096, "n": 16, "temperature": 0}


def _stats(server) -> dict:
    return httpx.get(server.url + "/metrics", timeout=TIMEOUT_S).json()


def _wait_for(condition, what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _in_background(fn) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        try:
            result["response"] = fn()
        except httpx.HTTPError as error:
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


@pytest.fixture(scope="module")
def small_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One sequence at a time, one request waiting, a 4 s deadline."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    args = (
        "--max-batch-size", "1", "--batch-wait-ms", "0", "--max-queue", "1",
        "--request-timeout", str(DEADLINE_S),
    )  # fmt: skip
    with odyssey_serve(tiny_model_dir, log, *args) as running:
        yield running


def test_a_full_queue_is_a_503_and_late_work_a_504(small_server) -> None:
    server = small_server
    batches = _stats(server)["batches"]
    running, first = _in_background(lambda: post_chat(server.url, chat_body(**LONG)))
    _wait_for(lambda: _stats(server)["batches"] > batches, "the first request to run")
    waiting, second = _in_background(lambda: post_chat(server.url, chat_body(**LONG)))
    _wait_for(lambda: _stats(server)["in_flight"] == 2, "the second request to wait")

    refused = post_chat(server.url, chat_body(), timeout=10)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "server_overloaded"
    assert int(refused.headers["Retry-After"]) >= 1
    assert "--max-queue" in refused.json()["error"]["message"]

    running.join(TIMEOUT_S)
    waiting.join(TIMEOUT_S)
    for result in (first, second):  # both past the deadline: answered 504, work dropped
        assert result["response"].status_code == 504, result
        assert result["response"].json()["error"]["code"] == "timeout"
    _wait_for(lambda: _stats(server)["in_flight"] == 0, "the server to drop the late work")
    assert post_chat(server.url, chat_body()).status_code == 200


def test_the_work_of_a_client_that_left_is_dropped(small_server) -> None:
    server = small_server
    before = _stats(server)
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        post_chat(server.url, chat_body(**LONG), timeout=1.5)
    _wait_for(lambda: _stats(server)["in_flight"] == 0, "the server to see the client leave")
    _wait_for(
        lambda: _stats(server)["abandoned"] > before["abandoned"], "the work to be dropped", 5
    )
    answer = post_chat(server.url, chat_body(), timeout=5)  # the generation thread is free
    assert answer.status_code == 200, answer.text


def test_sigterm_stops_the_server_while_it_generates(tiny_model_dir, tmp_path) -> None:
    server = odyssey_serve(tiny_model_dir, tmp_path / "serve.log", "--max-batch-size", "8")
    with server:
        batches = _stats(server)["batches"]
        thread, result = _in_background(lambda: post_chat(server.url, chat_body(**LONG)))
        _wait_for(lambda: _stats(server)["batches"] > batches, "generation to start")
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server still runs 20 s after SIGTERM:\n{server.tail()}")
        thread.join(TIMEOUT_S)
    answer = result.get("response")
    if answer is not None:  # answered before the socket closed: a clear 503, not a hang
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "shutting_down"

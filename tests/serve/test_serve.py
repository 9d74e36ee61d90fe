"""`odyssey serve`: the OpenAI-compatible server on the tiny Qwen3-VL, over real HTTP."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import model_fixtures
import numpy as np
import openai
import pytest
from click.testing import CliRunner
from model_fixtures import make_observations

from odyssey_core.policy import GenerationParams
from odyssey_core.policy.openai_backend import encode_image_data_url
from odyssey_core.protocol import get_system_prompt
from odyssey_core.serve import InsecureBindError, check_bind_security, is_loopback

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy

KEY = "test-key-123"
MODEL = "tiny-vl"


@pytest.fixture(scope="module")
def server(tiny_policy):
    from odyssey_core.serve.app import ServerThread, create_app

    app = create_app(tiny_policy, MODEL, api_key=KEY, max_batch_size=8, batch_wait_ms=20)
    with ServerThread(app) as running:
        yield running


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def _messages(image: np.ndarray, text: str) -> list[dict]:
    return [
        {"role": "system", "content": get_system_prompt("odland")},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": encode_image_data_url(image)}},
                {"type": "text", "text": text},
            ],
        },
    ]


def test_bind_security_check() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_bind_security(host, None)
    for host in ("0.0.0.0", "::", "", "192.168.1.4", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(InsecureBindError, match="API key"):
            check_bind_security(host, None)
        check_bind_security(host, "a-key")  # fine with a key


def test_cli_refuses_public_bind_without_key(monkeypatch, tmp_path: Path) -> None:
    from odyssey_core.serve.cli import serve_command

    monkeypatch.delenv("ODYSSEY_API_KEY", raising=False)
    # The checkpoint does not exist: the refusal must come before any loading.
    result = CliRunner().invoke(serve_command, [str(tmp_path / "nope"), "--host", "0.0.0.0"])
    assert result.exit_code == 2, result.output
    assert "without an API key" in result.output


def test_auth_models_and_error_format(server, client) -> None:
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    response = httpx.get(server.url + "/v1/models")
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key" and "Bearer" in error["message"]
    wrong = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert [m.id for m in client.models.list()] == [MODEL]

    image = make_observations(["x"])[0].image
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=_messages(image, "hi"))
    assert info.value.body["code"] == "model_not_found"

    remote = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x.org/a.png"}}],
        }
    ]
    with pytest.raises(openai.BadRequestError, match="offline"):
        client.chat.completions.create(model=MODEL, messages=remote)

    headers = {"Authorization": f"Bearer {KEY}"}
    bad = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL}, headers=headers)
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    broken = httpx.post(server.url + "/v1/chat/completions", content=b"{not json", headers=headers)
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"


def test_completion_matches_local_policy_with_logprobs(client, tiny_policy) -> None:
    [obs] = make_observations(["Level 1-1. Choose the buttons to press next."], seed=3)
    [local] = tiny_policy.generate([obs], GenerationParams(temperature=0, max_new_tokens=12))
    response = client.chat.completions.create(
        model=MODEL,
        messages=_messages(obs.image, obs.text),
        temperature=0,
        max_tokens=12,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    choice = response.choices[0]
    assert response.model_extra["prompt_token_ids"] == local.prompt_ids
    assert choice.model_extra["token_ids"] == local.response_ids
    assert choice.message.content == local.text
    assert choice.finish_reason == local.finish_reason
    served = [item.logprob for item in choice.logprobs.content]
    assert served == pytest.approx(local.logprobs, abs=1e-4)
    assert response.usage.prompt_tokens == len(local.prompt_ids)
    assert response.usage.completion_tokens == len(local.response_ids)


def test_text_only_and_stop_strings(client) -> None:
    response = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        temperature=0,
        max_tokens=6,
        n=2,
    )
    assert len(response.choices) == 2
    assert response.choices[0].message.content == response.choices[1].message.content
    text = response.choices[0].message.content
    if len(text) > 2:  # stop at a piece of the greedy answer: the text ends before it
        stopped = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hello"}],
            temperature=0,
            max_tokens=6,
            stop=[text[1:3]],
        )
        assert stopped.choices[0].message.content == text[: text.index(text[1:3])]
        assert stopped.choices[0].finish_reason == "stop"


def test_concurrent_requests_are_batched_and_batch_independent(tiny_policy) -> None:
    from odyssey_core.serve.app import ServerThread, create_app

    # A long wait makes the batch deterministic even on a loaded machine.
    app = create_app(tiny_policy, MODEL, max_batch_size=4, batch_wait_ms=400)
    observations = make_observations(["a", "b", "c", "d"], seed=5)
    with ServerThread(app) as server:
        local = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)

        def ask(i: int) -> tuple[str, int]:
            response = local.chat.completions.create(
                model=MODEL,
                messages=_messages(observations[i].image, observations[i].text),
                temperature=1.0,
                seed=100 + i,
                max_tokens=4 + 2 * i,  # different limits share one batch
            )
            return response.choices[0].message.content, response.usage.completion_tokens

        results: dict[int, tuple[str, int]] = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, ask(i))) for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = httpx.get(server.url + "/metrics").json()
        batch_sizes = list(app.state.batcher.batch_sizes)
        alone = ask(2)  # the same request on its own: same seed, same answer

    assert sum(batch_sizes) == 4 and max(batch_sizes) >= 2, batch_sizes
    assert stats["sequences"] == 4 and stats["max_batch_size_seen"] == max(batch_sizes)
    assert all(results[i][1] <= 4 + 2 * i for i in range(4))
    assert alone == results[2]

"""`odyssey serve`'s bounds in process (fast): hostile images, bodies, counts, the prompt
token count against the processor's, a failing row isolated from its batch, Host parsing,
and the command's options."""

from __future__ import annotations

import asyncio
import base64
import io
import time

import httpx
import model_fixtures
import pytest
from click.testing import CliRunner
from PIL import Image

from odyssey_core.policy import GenerationParams
from odyssey_core.serve.app import ServeLimits, ServerThread, create_app
from odyssey_core.serve.batching import Batcher
from odyssey_core.serve.chat import ChatHFPolicy, ChatItem, PromptPreparer
from odyssey_core.serve.cli import serve_command
from odyssey_core.serve.errors import APIError
from odyssey_core.serve.guard import host_name
from odyssey_core.serve.schema import ChatCompletionRequest

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy

MODEL = "tiny"
LIMITS = ServeLimits(
    max_body_bytes=256 * 1024,
    max_messages=4,
    max_images=2,
    max_image_pixels=512 * 512,
    default_max_tokens=3,
    max_tokens_limit=8,
)


def _image_url(image: Image.Image, fmt: str = "PNG") -> str:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


def _body(*urls: str, text: str = "hi", messages: int = 1) -> dict:
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": text})
    return {"model": MODEL, "messages": [{"role": "user", "content": content}] * messages}


@pytest.fixture(scope="module")
def server(tiny_policy):
    app = create_app(tiny_policy, MODEL, max_batch_size=4, batch_wait_ms=5, limits=LIMITS)
    with ServerThread(app) as running:
        yield running


def _post(server, body: dict | None = None, **kwargs) -> httpx.Response:
    if body is not None:
        kwargs["json"] = body
    return httpx.post(server.url + "/v1/chat/completions", timeout=60, **kwargs)


def _truncated_png() -> str:
    url = _image_url(Image.effect_noise((64, 64), 40).convert("RGB"))
    return url[: len(url) // 2 // 4 * 4]  # valid base64, the PNG cut after its header


@pytest.mark.parametrize(
    ("url", "code"),
    [
        (_image_url(Image.new("1", (14000, 14000))), "image_too_large"),
        (_image_url(Image.new("RGB", (600, 2))), "image_aspect_ratio"),
        (_truncated_png(), "invalid_image"),
        ("data:image/png;base64,bm90IGFuIGltYWdl", "invalid_image"),  # "not an image"
        ("data:image/png;base64,@@@", "invalid_image"),
        ("data:image/tiff;base64," + _image_url(Image.new("RGB", (8, 8)), "TIFF")[23:], None),
        ("https://example.org/a.png", "remote_image_url"),
    ],
)
def test_hostile_images_are_a_clear_400(server, url: str, code: str | None) -> None:
    response = _post(server, _body(url))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[0].content[0]" or error["param"] == "messages"
    assert error["code"] == (code or "invalid_image"), error


def test_real_images_of_several_formats_answer(server) -> None:
    jpeg = _image_url(Image.new("RGB", (40, 30), (200, 10, 10)), "JPEG")
    webp = _image_url(Image.new("RGB", (31, 17), (10, 200, 10)), "WEBP")
    response = _post(server, _body(jpeg, webp))
    assert response.status_code == 200, response.text


def test_counts_over_the_limits_are_a_400(server) -> None:
    small = _image_url(Image.new("RGB", (8, 8)))
    too_many_images = _post(server, _body(small, small, small))
    assert too_many_images.json()["error"]["code"] == "too_many_images"
    too_many_messages = _post(server, _body(messages=5))
    assert too_many_messages.json()["error"]["code"] == "too_many_messages"
    assert "--max-messages" in too_many_messages.json()["error"]["message"]
    too_long = _post(server, {**_body(), "max_tokens": 9})
    assert too_long.json()["error"]["code"] == "max_tokens_too_large"


def test_a_body_over_the_limit_is_a_413(server) -> None:
    big = _body(text="x" * (300 * 1024))
    declared = _post(server, big)
    assert declared.status_code == 413, declared.text
    assert declared.json()["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the bound is counted as the body arrives
        payload = httpx.Request("POST", "http://x", json=big).content
        for start in range(0, len(payload), 32 * 1024):
            yield payload[start : start + 32 * 1024]

    chunked = _post(server, content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 413, chunked.text


def test_the_prompt_token_count_is_the_processors(tiny_policy) -> None:
    policy = ChatHFPolicy.wrap(tiny_policy)
    preparer = PromptPreparer(policy, ServeLimits())
    images = [Image.new("RGB", size, (40, 80, 120)) for size in ((160, 144), (33, 500), (7, 9))]
    cases = [
        _body(text="hello there"),
        _body(_image_url(images[0]), text="Level 1-1."),
        _body(*(_image_url(im) for im in images), text="three frames"),
    ]
    for body in cases:
        request = ChatCompletionRequest.model_validate(body)
        prepared = preparer.prepare(request, 4)
        item = ChatItem(prepared.chat, prepared.images, max_new_tokens=1)
        [generation] = policy.generate_chats([item], GenerationParams(temperature=0))
        assert prepared.prompt_tokens == len(generation.prompt_ids)


def test_a_prompt_beyond_the_context_is_refused_by_its_counts(tiny_policy) -> None:
    preparer = PromptPreparer(ChatHFPolicy.wrap(tiny_policy), ServeLimits())
    request = ChatCompletionRequest.model_validate(_body(text="y" * 10**6))
    with pytest.raises(APIError, match="at least") as info:
        preparer.check_shape(request, 4)  # no tokenizing: a bound from the byte count
    assert info.value.code == "context_length_exceeded"


def test_a_row_that_fails_its_batch_fails_alone(tiny_policy) -> None:
    policy = ChatHFPolicy.wrap(tiny_policy)

    def item(image: Image.Image) -> ChatItem:
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "go"}]}
        ]
        return ChatItem(messages, [image], max_new_tokens=3)

    good = [item(Image.new("RGB", (64, 48), (i * 60, 0, 0))) for i in range(3)]
    bad = item(Image.new("RGB", (900, 2)))  # past the checks, as a bug would let it

    async def run() -> list:
        batcher = Batcher(policy, max_batch_size=4, batch_wait_ms=200)
        await batcher.start()
        try:
            deadline = time.monotonic() + 60
            params = GenerationParams(temperature=0)
            jobs = [batcher.submit([it], params, deadline) for it in (good[0], bad, *good[1:])]
            outcomes = await asyncio.gather(*(j.future for j in jobs), return_exceptions=True)
            return [outcomes, list(batcher.batch_sizes)]
        finally:
            await batcher.stop()

    outcomes, sizes = asyncio.run(run())
    assert sizes[0] == 4  # they did share a batch
    assert isinstance(outcomes[1], ValueError)
    for outcome in (outcomes[0], *outcomes[2:]):
        generations, version = outcome
        assert len(generations) == 1 and version == 0


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:8000", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]:8000", "::1"),
        ("Attacker.Example:80", "attacker.example"),
        ("", None),
        (None, None),
        ("[::1", None),
        ("::1", None),
    ],
)
def test_host_header_parsing(header: str | None, name: str | None) -> None:
    assert host_name(header) == name


def test_weight_routes_are_off_with_a_root_but_no_key(tiny_policy, tmp_path) -> None:
    app = create_app(tiny_policy, MODEL, weights_root=tmp_path)
    with ServerThread(app) as running:
        answer = httpx.post(running.url + "/v1/weights/reload", json={"path": "."})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "weights_disabled"


def test_the_command_documents_its_limits_and_refuses_unsafe_starts(monkeypatch, tmp_path):
    for variable in ("ODYSSEY_API_KEY", "ODYSSEY_ADMIN_KEY"):
        monkeypatch.delenv(variable, raising=False)
    runner = CliRunner()
    usage = runner.invoke(serve_command, ["--help"]).output
    for option in (
        "--weights-root", "--admin-key", "--allowed-host", "--max-queue", "--request-timeout",
        "--max-body-mb", "--max-messages", "--max-images", "--max-image-pixels",
        "--max-prompt-tokens", "--max-completion-tokens", "--shutdown-timeout",
        "ODYSSEY_API_KEY", "ODYSSEY_ADMIN_KEY",
    ):  # fmt: skip
        assert option in usage, option
    # --weights-root without any key: refused before anything is loaded
    refused = runner.invoke(serve_command, [str(tmp_path / "nope"), "--weights-root", "."])
    assert refused.exit_code == 2 and "needs a key" in refused.output
    # a key on the command line works but is flagged: `ps` shows it
    flagged = runner.invoke(
        serve_command, [str(tmp_path / "nope"), "--api-key", "k", "--weights-root", "/nope"]
    )
    assert "visible to every local user" in flagged.output
    assert flagged.exit_code == 2 and "is not a folder" in flagged.output

"""Hostile clients against a real `odyssey serve` on loopback with no key (the documented
default): weight routes, DNS rebinding, oversized prompts, decompression-bomb images, and a
bad image in a batch of good requests."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import model_fixtures
import pytest

from odyssey_core.models.loading import load_model
from odyssey_core.policy.weight_sync import export_weights, write_weights
from serve.helpers_serve import (
    MODEL,
    TIMEOUT_S,
    chat_body,
    odyssey_serve,
    peak_rss_mib,
    png_data_url,
    post_chat,
)

tiny_model_dir = model_fixtures.tiny_model_dir

pytestmark = pytest.mark.slow  # one `odyssey serve` child process for the module


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    args = ("--max-batch-size", "4", "--batch-wait-ms", "300")
    with odyssey_serve(tiny_model_dir, log, *args) as running:
        yield running


def test_weight_routes_are_refused_without_a_key(server, tiny_model_dir, tmp_path) -> None:
    folder = tmp_path / "weights"
    write_weights(export_weights(load_model(tiny_model_dir)), folder)
    reload = httpx.post(server.url + "/v1/weights/reload", json={"path": str(folder)})
    assert reload.status_code == 403, reload.text
    assert reload.json()["error"]["code"] == "weights_disabled"
    assert "--weights-root" in reload.json()["error"]["message"]
    checksum = httpx.get(server.url + "/v1/weights/checksum")
    assert checksum.status_code == 403, checksum.text


@pytest.mark.parametrize("path", ["/health", "/v1/models"])
def test_a_foreign_host_header_is_refused(server, path: str) -> None:
    # What a web page gets after rebinding its own name to 127.0.0.1.
    foreign = httpx.get(server.url + path, headers={"Host": "attacker.example"})
    assert foreign.status_code == 400, foreign.text
    assert foreign.json()["error"]["code"] == "untrusted_host"
    port = server.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert httpx.get(server.url + path, headers={"Host": host}).status_code == 200


def test_a_foreign_host_cannot_generate(server) -> None:
    response = httpx.post(
        server.url + "/v1/chat/completions",
        json=chat_body(),
        headers={"Host": "attacker.example:8000"},
        timeout=TIMEOUT_S,
    )
    assert response.status_code == 400, response.text


def test_oversized_prompts_are_refused_before_generation(server) -> None:
    megabyte = post_chat(server.url, chat_body("x" * 2**20), timeout=30)
    assert megabyte.status_code == 400, megabyte.text
    assert megabyte.json()["error"]["code"] == "context_length_exceeded"
    # Short in bytes, long in tokens: counted by the tokenizer, not by the cheap bound.
    many_tokens = post_chat(server.url, chat_body("ab " * 9000), timeout=30)
    assert many_tokens.status_code == 400, many_tokens.text
    assert "tokens" in many_tokens.json()["error"]["message"]
    assert post_chat(server.url, chat_body("hi")).status_code == 200  # still serving


def test_a_huge_png_is_a_400_before_it_is_decoded(server) -> None:
    bomb = png_data_url(14000, 14000, mode="1")  # 196 megapixels in about 24 KiB
    assert len(bomb) < 64 * 1024
    response = post_chat(server.url, chat_body("hi", bomb))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "image_too_large" and "--max-image-pixels" in error["message"]


def test_concurrent_huge_pngs_do_not_grow_the_server(server) -> None:
    big = png_data_url(10000, 10000, mode="1")  # 100 megapixels: 300 MB once decoded as RGB
    before = peak_rss_mib(server.pid)
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: post_chat(server.url, chat_body("hi", big)), range(6)))
    assert [a.status_code for a in answers] == [400] * 6, [a.text for a in answers]
    assert server.process.poll() is None
    growth = peak_rss_mib(server.pid) - before
    assert growth < 200, f"the server's peak memory grew by {growth:.0f} MiB"


def test_an_extreme_aspect_image_fails_alone_in_its_batch(server) -> None:
    good = [png_data_url(160, 144, color=(30 * i, 90, 200 - 20 * i)) for i in range(7)]
    bad = png_data_url(3000, 10)  # 300:1, which the image processor cannot take
    bodies = [chat_body(f"frame {i}", url) for i, url in enumerate(good)]
    bodies.insert(3, chat_body("the odd one", bad))
    start = threading.Barrier(len(bodies))

    def ask(body: dict) -> httpx.Response:
        start.wait()  # all at once, so they share batches
        return post_chat(server.url, body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(ask, bodies))
    statuses = [a.status_code for a in answers]
    assert statuses == [200, 200, 200, 400, 200, 200, 200, 200], (statuses, answers[3].text)
    assert answers[3].json()["error"]["code"] == "image_aspect_ratio"
    for answer in answers[:3] + answers[4:]:
        assert answer.json()["model"] == MODEL

"""The weight routes of a real `odyssey serve` (admin key, weights root) under hostile
paths and files: nothing outside the root is read or described, a FIFO blocks nothing,
non-finite weights are refused, a reload never splits an answer, and an internal failure is
a 500 that tells the client nothing internal."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import model_fixtures
import pytest
import torch

from odyssey_core.models.loading import load_model
from odyssey_core.policy.weight_sync import export_weights, write_weights
from serve.helpers_serve import MODEL, TIMEOUT_S, chat_body, odyssey_serve, post_chat

tiny_model_dir = model_fixtures.tiny_model_dir

pytestmark = pytest.mark.slow  # one `odyssey serve` child process for the module

ADMIN = "admin-key-for-the-weight-tests"
BATCH = 4


@dataclass(frozen=True)
class Layout:
    root: Path  # the server's --weights-root
    outside: Path  # a folder of valid weights beside it
    tensor_names: tuple[str, ...]


@pytest.fixture(scope="module")
def layout(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    base = tmp_path_factory.mktemp("weights")
    root, outside = base / "root", base / "outside"
    named = {name: t.clone() for name, t in export_weights(load_model(tiny_model_dir))}
    write_weights(named.items(), root / "base")
    generator = torch.Generator().manual_seed(7)
    perturbed = {n: t + 0.05 * torch.randn(t.shape, generator=generator) for n, t in named.items()}
    write_weights(perturbed.items(), root / "perturbed")
    nan_name = "model.language_model.layers.0.mlp.up_proj.weight"
    poisoned = {**named, nan_name: named[nan_name].clone()}
    poisoned[nan_name][5, 7] = float("nan")
    write_weights(poisoned.items(), root / "nan")
    # Finite, so it loads, but the logits overflow: sampling then fails inside torch.
    overflow = {**named, "model.language_model.norm.weight": torch.full_like(
        named["model.language_model.norm.weight"], 3e38)}  # fmt: skip
    write_weights(overflow.items(), root / "overflow")
    write_weights(named.items(), outside / "weights")
    (root / "link-out").symlink_to(outside / "weights", target_is_directory=True)
    (root / "file-link").mkdir()
    (root / "file-link" / "model.safetensors").symlink_to(outside / "weights" / "model.safetensors")
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "model.safetensors")
    return Layout(root, outside, tuple(named))


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, layout: Layout, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    args = ("--weights-root", str(layout.root), "--max-batch-size", str(BATCH))
    with odyssey_serve(tiny_model_dir, log, *args, env={"ODYSSEY_ADMIN_KEY": ADMIN}) as running:
        yield running


def _reload(server, path: str, key: str | None = ADMIN, timeout: float = TIMEOUT_S):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(
        server.url + "/v1/weights/reload", json={"path": path}, headers=headers, timeout=timeout
    )


def _checksum(server) -> dict:
    answer = httpx.get(
        server.url + "/v1/weights/checksum",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_weight_routes_need_the_admin_key(server) -> None:
    for key in (None, "wrong"):
        assert _reload(server, "base", key=key).status_code == 401
    assert httpx.get(server.url + "/v1/weights/checksum").status_code == 401
    # chat needs no key here (no ODYSSEY_API_KEY), the weights do
    assert post_chat(server.url, chat_body()).status_code == 200


def test_paths_leaving_the_root_are_refused_alike(server, layout: Layout) -> None:
    before = _checksum(server)
    folders = [
        "../outside/weights",
        str(layout.outside / "weights"),
        "link-out",  # a symlink inside the root to a folder outside it
        "base/../../outside/weights",
        "/etc",
        "../../../../../../etc",
        "/no/such/folder/anywhere",  # answered exactly like one that exists
    ]
    answers = {path: _reload(server, path) for path in folders}
    answers["file-link"] = _reload(server, "file-link")  # a file symlinked out of the root
    for path, answer in answers.items():
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error"]["code"] == "outside_weights_root"
        text = answer.text
        assert str(layout.outside) not in text and str(layout.root) not in text, text
        assert "etc" not in text and "no/such" not in text, text
        assert not any(name in text for name in layout.tensor_names), text
    folder_bodies = {answers[path].text for path in folders}
    assert len(folder_bodies) == 1, folder_bodies  # nothing tells what exists out there
    assert _checksum(server) == before


def test_a_fifo_named_safetensors_blocks_no_route(server) -> None:
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_reload, server, "fifo", timeout=30)
        health = httpx.get(server.url + "/health", timeout=10)
        answer = pending.result()
    assert health.status_code == 200
    assert answer.status_code == 400, answer.text
    assert "not a regular file" in answer.json()["error"]["message"]
    assert post_chat(server.url, chat_body()).status_code == 200


def test_non_finite_weights_are_refused_before_any_copy(server) -> None:
    before = _checksum(server)
    answer = _reload(server, "nan")
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert "NaN" in message and "model.language_model.layers.0.mlp.up_proj.weight" in message
    assert _checksum(server) == before  # nothing was copied
    assert post_chat(server.url, chat_body(temperature=1.0)).status_code == 200


def _greedy_tokens(server, n: int, max_tokens: int) -> tuple[str, list[list[int]]]:
    body = chat_body(
        "Level 1-1. Go right.", n=n, max_tokens=max_tokens, temperature=0, return_token_ids=True
    )
    answer = post_chat(server.url, body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    return data["system_fingerprint"], [choice["token_ids"] for choice in data["choices"]]


def _batches(server) -> int:
    return int(httpx.get(server.url + "/metrics", timeout=TIMEOUT_S).json()["batches"])


def test_a_reload_during_an_n16_request_gives_it_one_weight_version(server) -> None:
    tokens = 160  # long enough that the reload lands while the first batches run
    # Reference answers per weight version, from batches shaped like the n=16 request's
    # chunks (BATCH identical rows).
    _, base_rows = _greedy_tokens(server, BATCH, tokens)
    assert _reload(server, "perturbed").status_code == 200
    _, perturbed_rows = _greedy_tokens(server, BATCH, tokens)
    assert _reload(server, "base").status_code == 200
    version_before = _checksum(server)["version"]
    assert base_rows[0] != perturbed_rows[0], "the two weight versions must answer differently"
    assert len({json.dumps(r) for r in base_rows + perturbed_rows}) == 2

    batches_before = _batches(server)
    result: dict = {}

    def ask() -> None:
        result["fingerprint"], result["rows"] = _greedy_tokens(server, 16, tokens)

    asker = threading.Thread(target=ask)
    asker.start()
    deadline = time.monotonic() + TIMEOUT_S
    while _batches(server) == batches_before:  # the first of its four batches is running
        assert time.monotonic() < deadline, "the n=16 request never started"
        time.sleep(0.005)
    reload = _reload(server, "perturbed")
    asker.join(TIMEOUT_S)
    assert reload.status_code == 200, reload.text
    assert reload.json()["version"] == version_before + 1
    assert result["fingerprint"] == f"odyssey-weights-{version_before}"
    assert result["rows"] == [base_rows[0]] * 16  # every choice from the weights it began with
    after_fingerprint, after_rows = _greedy_tokens(server, BATCH, tokens)
    assert after_fingerprint == f"odyssey-weights-{version_before + 1}"
    assert after_rows == perturbed_rows
    assert _reload(server, "base").status_code == 200


def test_an_internal_failure_is_a_500_without_internal_text(server) -> None:
    assert _reload(server, "overflow").status_code == 200
    try:
        answer = post_chat(server.url, chat_body(temperature=1.0))
    finally:
        assert _reload(server, "base").status_code == 200
    assert answer.status_code == 500, answer.text
    error = answer.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    for internal in ("probability", "RuntimeError", "Traceback", "tensor", "nan", "inf", ".py"):
        assert internal not in error["message"], error["message"]
    match = re.search(r"error id ([0-9a-f]+)", error["message"])
    assert match, error["message"]
    deadline = time.monotonic() + 10
    while match.group(1) not in server.tail(20000) and time.monotonic() < deadline:
        time.sleep(0.1)  # the log line is written while the answer is on its way
    log = server.tail(20000)
    assert match.group(1) in log and "probability tensor" in log  # the detail is in the log
    assert post_chat(server.url, chat_body(temperature=1.0)).json()["model"] == MODEL

"""`odyssey serve` under bad input and load, over real HTTP on loopback.

* schemathesis generates requests from the server's own OpenAPI schema (a fixed example
  budget per operation, a timeout per request): no 5xx, no hang, every error in OpenAI's
  format. The schema it fuzzes is the served one with real values mixed into the generated
  ones: the served model's name, real PNG images (small ones of any shape, a 196-megapixel
  one, a 300:1 one, truncated and remote ones), real folders under the weights root (valid
  weights, NaN weights, a shape mismatch, a FIFO named ``*.safetensors``, symlinks out of
  the root, ``/etc``), so generation, image checks and weight reloads are all reached.
* concurrent clients (threads) with distinct prompts each get the answer to their own prompt
  (the answer the same request gets alone, greedy), and the server's resident memory
  (``/proc/self/status``: the server runs in this process's thread) stays flat.
"""

from __future__ import annotations

import base64
import copy
import io
import os
import threading
import time
from pathlib import Path

import httpx
import model_fixtures
import pytest
import schemathesis
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from PIL import Image
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

from odyssey_core.models.loading import load_model
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.policy.weight_sync import export_weights, write_weights
from odyssey_core.serve.app import ServeLimits, ServerThread, create_app

tiny_model_dir = model_fixtures.tiny_model_dir

KEY = "fuzz-key"
ADMIN = "fuzz-admin-key"
MODEL = "tiny-vl"
REQUEST_TIMEOUT_S = 30
LIMITS = ServeLimits(default_max_tokens=4, max_tokens_limit=8, max_image_pixels=256 * 256)


@pytest.fixture(scope="module")
def weights_root(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real folders of every kind a reload may be pointed at."""
    base = tmp_path_factory.mktemp("fuzz-weights")
    root, outside = base / "root", base / "outside"
    named = {name: t.clone() for name, t in export_weights(load_model(tiny_model_dir))}
    write_weights(named.items(), root / "base")
    first = next(iter(named))
    write_weights({**named, first: torch.zeros(3)}.items(), root / "shape")
    poisoned = {**named, first: named[first].clone().fill_(float("nan"))}
    write_weights(poisoned.items(), root / "nan")
    write_weights(named.items(), outside / "weights")
    (root / "link-out").symlink_to(outside / "weights", target_is_directory=True)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "model.safetensors")
    (root / "empty").mkdir()
    return root


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, weights_root: Path):
    # Its own policy: the fuzzed reloads write into its weights.
    app = create_app(
        HFPolicy(tiny_model_dir),
        MODEL,
        api_key=KEY,
        admin_key=ADMIN,
        max_batch_size=4,
        batch_wait_ms=1,
        weights_root=weights_root,
        limits=LIMITS,
    )
    with ServerThread(app) as running:
        yield running


# -- the fuzzed schema: the served one, with real values where generated ones reach nothing --


def _png_url(width: int, height: int, color: tuple[int, int, int], mode: str = "RGB") -> str:
    buffer = io.BytesIO()
    Image.new(mode, (width, height), color if mode == "RGB" else 0).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _special_image_urls() -> list[str]:
    small = _png_url(32, 24, (10, 200, 30))
    jpeg = io.BytesIO()
    Image.new("RGB", (40, 30), (90, 90, 250)).save(jpeg, format="JPEG")
    return [
        _png_url(14000, 14000, (0, 0, 0), mode="1"),  # a decompression bomb, 24 KiB
        _png_url(300, 1, (0, 0, 0)),  # 300:1
        small[: len(small) // 2 + 2],  # truncated after the header
        "data:image/jpeg;base64," + base64.b64encode(jpeg.getvalue()).decode(),
        "data:image/png;base64,@@not base64@@",
        "https://example.org/frame.png",
    ]


def _strategies(root: Path) -> dict[str, st.SearchStrategy]:
    generated_text = st.text(max_size=24)
    small_pngs = st.builds(
        _png_url,
        st.integers(1, 64),
        st.integers(1, 64),
        st.tuples(*[st.integers(0, 255)] * 3),
    )
    paths = [
        "base", "shape", "nan", "fifo", "empty", "link-out", "missing", "../outside/weights",
        str(root / "base"), str(root.parent / "outside" / "weights"), "/etc", "../../..",
    ]  # fmt: skip
    special = _special_image_urls()
    return {
        "odyssey-model": st.one_of(st.just(MODEL), st.just(MODEL), generated_text),
        "odyssey-part-type": st.one_of(st.just("image_url"), st.just("text"), generated_text),
        # small real images most often, so that many requests with images are answered
        "odyssey-image-url": st.one_of(
            small_pngs, small_pngs, st.sampled_from(special), generated_text
        ),
        "odyssey-weights-path": st.one_of(st.sampled_from(paths), generated_text),
    }


#: component -> property -> the format whose strategy gives it real values
REAL_VALUES = {
    "ChatCompletionRequest": {"model": "odyssey-model"},
    "ContentPart": {"type": "odyssey-part-type"},
    "ImageURL": {"url": "odyssey-image-url"},
    "WeightReloadRequest": {"path": "odyssey-weights-path"},
}


def fuzz_schema(served: dict, root: Path) -> dict:
    """The served OpenAPI schema with the formats of :data:`REAL_VALUES` on its strings
    (and on the bare-string form of an image part), their strategies registered."""
    for name, strategy in _strategies(root).items():
        schemathesis.openapi.format(name, strategy)
    schema = copy.deepcopy(served)
    components = schema["components"]["schemas"]
    for component, fields in REAL_VALUES.items():
        for field, fmt in fields.items():
            prop = components[component]["properties"][field]
            assert prop["type"] == "string", (component, field, prop)
            prop["format"] = fmt
    # Every message a list of parts, every part with an image field, so that images reach
    # the server often (string contents are what the other tests send).
    part = components["ContentPart"]
    part["required"] = ["type", "image_url"]
    image = part["properties"]["image_url"]
    image["anyOf"] = [option for option in image["anyOf"] if option.get("type") != "null"]
    for option in image["anyOf"]:
        if option.get("type") == "string":
            option["format"] = "odyssey-image-url"
    content = components["ChatMessage"]["properties"]["content"]
    content["anyOf"] = [{**o, "minItems": 1} for o in content["anyOf"] if o.get("type") == "array"]
    return schema


EXAMPLES = {GenerationMode.POSITIVE: 150, GenerationMode.NEGATIVE: 60}


def _fuzz(server, root: Path, *, with_key: bool) -> dict[str, int]:
    """Every operation of the fuzzed schema, valid and invalid requests; per operation and
    mode a fixed example budget. Returns the requests sent per operation and status."""
    served = httpx.get(server.url + "/openapi.json", timeout=REQUEST_TIMEOUT_S).json()
    api = schemathesis.openapi.from_dict(fuzz_schema(served, root))
    sent: dict[str, int] = {}
    for result in api.get_all_operations():
        operation = result.ok()
        for mode, budget in EXAMPLES.items():
            if not with_key:
                budget = budget // 4

            @settings(
                max_examples=budget,
                deadline=None,
                database=None,
                derandomize=True,  # the same requests on every run: failures reproduce
                suppress_health_check=list(HealthCheck),
                phases=[Phase.generate],
            )
            @given(case=operation.as_strategy(mode))
            def check(case) -> None:
                started = time.monotonic()
                # The admin key opens every route (the API key all but the weight ones).
                headers = {"Authorization": f"Bearer {ADMIN}"} if with_key else None
                response = case.call(
                    base_url=server.url, headers=headers, timeout=REQUEST_TIMEOUT_S
                )
                label = f"{case.operation.label} {response.status_code}"
                for key in (case.operation.label, label):
                    sent[key] = sent.get(key, 0) + 1
                kinds = []
                if response.status_code >= 400:  # every error in OpenAI's format
                    assert "message" in response.json()["error"], response.text
                    kinds.append(f"code {response.json()['error']['code']}")
                if response.status_code == 200 and "data:image/png" in repr(case.body):
                    kinds.append("answered with an image")
                for key in kinds:
                    sent[key] = sent.get(key, 0) + 1
                case.validate_response(response, checks=[not_a_server_error])
                assert time.monotonic() - started < REQUEST_TIMEOUT_S
                if not with_key and case.operation.path != "/health":
                    # 401, or 404 from the router for a path no route matches (a newline in
                    # the model name), before any handler runs
                    assert response.status_code in (401, 404), response.text

            try:
                check()
            except Unsatisfiable:  # no invalid request exists (an operation without inputs)
                assert mode is GenerationMode.NEGATIVE
    return sent


def test_no_server_error_on_any_generated_request(server, weights_root: Path) -> None:
    sent = _fuzz(server, weights_root, with_key=True)
    print(sent)
    assert {"POST /v1/chat/completions", "GET /v1/models", "GET /health"} <= set(sent)
    assert sent["POST /v1/chat/completions"] >= 30, sent
    assert sent.get("POST /v1/chat/completions 200", 0) >= 10, sent  # generation was reached
    assert sent.get("POST /v1/weights/reload 200", 0) >= 1, sent  # a real folder loaded
    assert sent.get("POST /v1/weights/reload 403", 0) >= 1, sent  # one out of the root
    # Real values reached the checks behind them (typical counts are several times these
    # floors); test_serve_limits sends each hostile image on its own as well.
    for kind in ("invalid_weights", "outside_weights_root"):
        assert sent.get(f"code {kind}", 0) >= 5, (kind, sent)
    image_codes = ("image_too_large", "image_aspect_ratio", "invalid_image", "remote_image_url")
    assert sum(sent.get(f"code {code}", 0) for code in image_codes) >= 3, sent
    assert sent.get("answered with an image", 0) >= 5, sent
    # after all that, the server still serves and /health answers at once
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200


def test_no_server_error_without_a_key(server, weights_root: Path) -> None:
    _fuzz(server, weights_root, with_key=False)


def _chat(server, **extra) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
    return httpx.post(
        server.url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=REQUEST_TIMEOUT_S,
    )


@pytest.mark.parametrize(
    "extra",
    [  # what fuzzing found answering 500 before the bounds were set
        {"seed": 2**70},
        {"seed": -(2**70)},
        {"stop_token_ids": [2**70]},
        {"repetition_penalty": 1e-308},
        {"max_tokens": 10**9},
    ],
)
def test_out_of_range_parameters_are_a_400(server, extra) -> None:
    response = _chat(server, **extra)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].startswith(next(iter(extra)))


@pytest.mark.parametrize("extra", [{"temperature": 1e-300}, {"top_p": 1e-300}])
def test_degenerate_sampling_settings_still_answer(server, extra) -> None:
    response = _chat(server, **extra)
    assert response.status_code == 200, response.text


# -- concurrent clients and memory ---------------------------------------------------------------


def _rss_kib() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


CLIENTS = 6
ROUNDS = 15
RSS_BOUND_MIB = 64  # growth allowed between the warm-up and the end of the run


def _ask(client: httpx.Client, url: str, prompt: str) -> str:
    response = client.post(
        url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": 6,
        },
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def test_concurrent_clients_get_their_own_answers_and_memory_stays_flat(server) -> None:
    prompts = [f"client {i}: say {word}" for i, word in enumerate("abcdefghijkl"[:CLIENTS])]
    with httpx.Client() as client:
        alone = {p: _ask(client, server.url, p) for p in prompts}  # each request on its own
    assert len(set(alone.values())) > 1, "the prompts must lead to different answers"

    def client_loop(index: int, answers: list[tuple[str, str]], errors: list[str]) -> None:
        with httpx.Client() as client:
            for round_ in range(ROUNDS):
                prompt = prompts[(index + round_) % CLIENTS]  # rotate: neighbours change
                try:
                    answers.append((prompt, _ask(client, server.url, prompt)))
                except Exception as error:  # reported below, not lost in a thread
                    errors.append(f"{type(error).__name__}: {error}")

    def run_all() -> tuple[list[tuple[str, str]], list[str], float]:
        answers: list[tuple[str, str]] = []
        errors: list[str] = []
        threads = [
            threading.Thread(target=client_loop, args=(i, answers, errors)) for i in range(CLIENTS)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(t.is_alive() for t in threads), "a client hung"
        return answers, errors, time.monotonic() - started

    run_all()  # warm-up: allocator pools, batch shapes
    baseline = _rss_kib()
    batches_before = server.server.config.app.state.batcher.stats()["batches"]
    total, samples = [], []
    for _ in range(3):
        answers, errors, _elapsed = run_all()
        assert not errors, errors[:3]
        total.extend(answers)
        samples.append(_rss_kib())
    assert len(total) == 3 * CLIENTS * ROUNDS
    for prompt, answer in total:  # every client got the answer to its own prompt
        assert answer == alone[prompt], (prompt, answer, alone[prompt])
    stats = server.server.config.app.state.batcher.stats()
    assert stats["batches"] - batches_before < len(total), "requests were never batched"
    growth_mib = (max(samples) - baseline) / 1024
    print(f"RSS baseline {baseline / 1024:.0f} MiB, after each run {[s // 1024 for s in samples]}")
    assert growth_mib < RSS_BOUND_MIB, (baseline, samples)

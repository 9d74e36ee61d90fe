"""`odyssey serve`'s weight reload and checksum routes: the checksum is the trainer's function
over the served weights, a reload changes what is generated exactly as loading the same
weights locally does, and a bad folder is refused with nothing changed."""

from __future__ import annotations

from pathlib import Path

import httpx
import model_fixtures
import pytest
import torch
from model_fixtures import make_observations

from odyssey_core.models.loading import load_model
from odyssey_core.policy import GenerationParams
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.policy.openai_backend import OpenAIPolicy, RetrySettings
from odyssey_core.policy.weight_sync import (
    OdysseyServeTarget,
    WeightSyncError,
    export_weights,
    weights_checksum,
    write_weights,
)
from odyssey_core.serve.app import ServerThread, create_app

torch.set_num_threads(1)
tiny_model_dir = model_fixtures.tiny_model_dir
KEY = "reload-key"
FAST = RetrySettings(max_retries=2, initial_backoff=0.001, max_backoff=0.01)


def _perturbed(path: Path, seed: int) -> torch.nn.Module:
    model = load_model(path)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return model


@pytest.fixture
def served(tiny_model_dir: Path, tmp_path: Path):
    policy = HFPolicy(tiny_model_dir)  # its own copy: the reloads change its weights
    (tmp_path / "allowed").mkdir()
    app = create_app(policy, "tiny", api_key=KEY, weights_root=tmp_path / "allowed")
    with ServerThread(app) as server:
        yield policy, server


def _get(server: ServerThread, path: str) -> httpx.Response:
    return httpx.get(server.url + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def _post(server: ServerThread, path: str, body: dict) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}"}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=60)


def test_reload_serves_the_new_weights(served, tiny_model_dir: Path, tmp_path: Path) -> None:
    policy, server = served
    first = _get(server, "/v1/weights/checksum").json()
    assert (
        first["checksum"] == weights_checksum(export_weights(load_model(tiny_model_dir))).as_dict()
    )
    assert first["version"] == 0
    assert httpx.get(server.url + "/v1/weights/checksum").status_code == 401

    new = _perturbed(tiny_model_dir, seed=5)
    target = OdysseyServeTarget(server.url + "/v1", tmp_path / "allowed", api_key=KEY)
    report = target.push(new, verify=True)
    expected = weights_checksum(export_weights(new))
    assert report.sent == expected and report.served == expected and report.version == 1
    assert target.served_checksum() == expected
    assert _get(server, "/v1/weights/checksum").json()["version"] == 1

    # generation now matches a local policy holding the same weights
    observations = make_observations(["Level 1-1. Go right.", "Level 1-3."], seed=2)
    params = GenerationParams(temperature=0, max_new_tokens=8)
    local = HFPolicy(new, policy.processor).generate(observations, params)
    remote = OpenAIPolicy(
        "tiny", server.url + "/v1", api_key=KEY, logprobs=True, return_token_ids=True, retry=FAST
    ).generate(observations, params)
    for got, want in zip(remote, local, strict=True):
        assert got.response_ids == want.response_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_bad_reloads_are_refused_and_change_nothing(served, tiny_model_dir, tmp_path) -> None:
    policy, server = served
    before = _get(server, "/v1/weights/checksum").json()["checksum"]
    named = dict(export_weights(_perturbed(tiny_model_dir, seed=6)))
    name = next(iter(named))
    write_weights({**named, name: torch.zeros(2)}.items(), tmp_path / "allowed" / "shape")
    write_weights(named.items(), tmp_path / "elsewhere")

    answer = _post(server, "/v1/weights/reload", {"path": str(tmp_path / "allowed" / "shape")})
    assert answer.status_code == 400 and "another shape" in answer.json()["error"]["message"]
    answer = _post(server, "/v1/weights/reload", {"path": str(tmp_path / "allowed" / "none")})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "path"
    answer = _post(server, "/v1/weights/reload", {"path": str(tmp_path / "elsewhere")})
    assert answer.status_code == 403
    answer = httpx.post(server.url + "/v1/weights/reload", json={"path": str(tmp_path)})
    assert answer.status_code == 401
    after = _get(server, "/v1/weights/checksum").json()
    assert after["checksum"] == before and after["version"] == 0

    target = OdysseyServeTarget(server.url + "/v1", tmp_path / "elsewhere" / "sync", api_key=KEY)
    with pytest.raises(WeightSyncError, match="HTTP 403"):
        target.push(policy.model, verify=True)

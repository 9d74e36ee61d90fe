"""An RL run whose rollouts come from `odyssey serve` in another process (``rollout.backend:
openai``), the trainer's weights pushed to it after every update.

The server is the real command (``odyssey serve CHECKPOINT``) on loopback, started for the
test with a key and a weights root (the weight routes are off without them) and stopped by
its PID. After every step the weights it serves hash to the trainer's
checksum, the trainer scored with its own recomputed log-probs (the old-vs-behaviour gap is
reported, and tiny because the server sampled with the same weights), and every prompt id
the server saw equals the one the trainer scored.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import model_fixtures
import pytest
import torch
from helpers_presets import gtr_preset

from odyssey_core.models.loading import load_model
from odyssey_core.policy.weight_sync import RolloutPolicy, export_weights, weights_checksum
from odyssey_core.recipes.gtr.settings import load_gtr_settings
from odyssey_core.recipes.gtr.train import build_trainer
from odyssey_core.serve.app import ServerProcess

torch.set_num_threads(1)  # see model_fixtures: tiny models on a busy machine
tiny_model_dir = model_fixtures.tiny_model_dir

pytestmark = pytest.mark.slow

KEY = "rollout-test-key"
KEY_ENV = "ODYSSEY_TEST_ROLLOUT_KEY"


def test_gtr_run_with_openai_backend_syncs_weights_every_step(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The weight routes need a key and a root holding the folders the trainer writes.
    monkeypatch.setenv(KEY_ENV, KEY)
    args = ["--model-name", "tiny", "--threads", "1", "--max-batch-size", "8"]
    args += ["--weights-root", str(tmp_path)]
    log = tmp_path / "serve.log"
    env = {"ODYSSEY_API_KEY": KEY}
    with ServerProcess.odyssey(tiny_model_dir, log, args=args, env=env) as server:
        base_url, root = server.base_url, server.url

        def served_checksum() -> dict:
            headers = {"Authorization": f"Bearer {KEY}"}
            answer = httpx.get(f"{root}/v1/weights/checksum", headers=headers, timeout=60.0)
            answer.raise_for_status()
            return answer.json()

        before = served_checksum()
        backend = {
            "kind": "openai",
            "base_url": base_url,
            "server": "odyssey",
            "concurrency": 4,
            "api_key_env": KEY_ENV,
        }
        preset = gtr_preset(tmp_path, tiny_model_dir, steps=2, rollout={"backend": backend})
        settings = load_gtr_settings(preset)
        trainer_sums: list[str] = []
        server_sums: list[dict] = []

        def after_step(step: int, metrics: dict[str, float]) -> None:
            trainer_sums.append(weights_checksum(export_weights(trainer.policy.model)).value)
            server_sums.append(served_checksum())

        trainer = build_trainer(settings, tmp_path / "run", callbacks=[after_step])
        assert isinstance(trainer.collector.policy, RolloutPolicy)
        assert trainer.policy is trainer.collector.policy.trainer_policy  # it scores
        try:
            history = trainer.train()
        finally:
            trainer.close()

    initial = weights_checksum(export_weights(load_model(tiny_model_dir)))
    assert before["checksum"]["value"] == initial.value  # the server starts on the checkpoint
    assert len(history) == 2
    assert [s["checksum"]["value"] for s in server_sums] == trainer_sums
    assert len({initial.value, *trainer_sums}) == 3  # each update changed the weights
    # one push before the first rollout, then one after each update
    assert [s["version"] for s in server_sums] == [2, 3]
    for metrics in history:
        assert metrics["weight_sync/verified"] == 1.0
        assert metrics["rollout/engine_prompt_mismatch_frac"] == 0.0
        assert metrics["rollout/engine_banned_token_frac"] == 0.0
        # the trainer recomputed the old log-probs; the server sampled with the same weights
        assert metrics["actor/old_vs_behaviour_logprob_abs"] < 1e-3
    # only the latest weight folder is kept
    folders = sorted(p.name for p in (tmp_path / "run" / "rollout-weights").iterdir())
    assert folders == ["weights-000003"]

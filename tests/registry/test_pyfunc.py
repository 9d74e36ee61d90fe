"""Registered versions are real MLflow Models: ``mlflow.pyfunc.load_model("models:/...@champion")``
predicts an action for an odland frame and a card frame, the version's page carries the
evaluation table, the decision, links and fingerprints, and ``mlflow models serve`` answers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import model_fixtures
import pytest
import torch
from helpers_procs import mlflow_process

from odyssey_core.registry.pyfunc import encode_frame
from odyssey_core.stages import RunConfig, StageContext, register_and_gate, run_stage

pytest_plugins = ["tests.s3_fixtures"]  # the MLflow (SQLite) fixture

torch.set_num_threads(1)  # tiny models on a busy machine (see tests/model_fixtures.py)
tiny_model_dir = model_fixtures.tiny_model_dir

BASE = [0.0, 1.0, 0.5, 0.2]
GOOD = [10.0, 11.0, 10.0, 9.0]


def _cfg(tmp_path: Path, mlflow_uri: str) -> RunConfig:
    return RunConfig(name="pyfunc", run_dir=tmp_path / "run", tracking_uri=mlflow_uri)


def _register(
    cfg: RunConfig, model_dir: Path, game: str, tags: dict[str, str] | None = None
) -> dict[str, Any]:
    """Publish the model folder, then register and gate it (it beats the base model)."""

    def publish(ctx: StageContext) -> dict[str, Any]:
        return {"checkpoint_uri": ctx.publish_dir(model_dir, "checkpoint", ref="checkpoint")}

    with cfg_parent(cfg) as parent:
        published = run_stage(cfg, f"rl-{game}", publish, parent_run_id=parent)

        def body(ctx: StageContext) -> dict[str, Any]:
            ctx.run.log_text("# report", "report/report.md")
            outcome = register_and_gate(
                ctx,
                game=game,
                checkpoint_uri=published["checkpoint_uri"],
                candidate_scores=GOOD,
                base_model="file:///base",
                evaluate_reference=lambda model, label, out: (BASE, {"label": label}),
                metrics={"eval.mean": sum(GOOD) / len(GOOD)},
                tags=tags,
            )
            return outcome.outputs()

        return run_stage(cfg, f"promote-{game}", body, parent_run_id=parent)


def cfg_parent(cfg: RunConfig) -> Any:
    from odyssey_core.stages import parent_run

    return parent_run(cfg, "test-flow")


def _odland_frame() -> Any:
    import numpy as np

    frame = np.zeros((144, 160, 3), np.uint8)
    frame[100:, :, 1] = 180  # ground
    frame[80:100, 20:30, 0] = 220  # the hero
    return frame


def _card_frame() -> tuple[Any, str, list[str]]:
    from odyssey_core.envs.registry import make_env

    env = make_env("cards-numberline")
    try:
        obs, info = env.reset(seed=3)
    finally:
        env.close()
    return obs.image, obs.text, list(info["legal_actions"])


def test_champion_loads_and_predicts_odland_and_cards(
    tmp_path: Path, mlflow_uri: str, tiny_model_dir: Path
) -> None:
    import mlflow
    import pandas as pd
    from mlflow import MlflowClient

    cfg = _cfg(tmp_path, mlflow_uri)
    out = _register(cfg, tiny_model_dir, "odland")
    assert out["promoted"] and out["champion"] == 1
    gtr_dir = tmp_path / "gtr-model"
    shutil.copytree(tiny_model_dir, gtr_dir)
    (gtr_dir / "gtr_training.json").write_text(
        json.dumps({"recipe": "gtr", "env": "cards-numberline"})
    )
    assert _register(cfg, gtr_dir, "gtr-numberline", {"odyssey.recipe": "gtr"})["promoted"]

    mlflow.set_tracking_uri(mlflow_uri)
    try:
        model = mlflow.pyfunc.load_model("models:/odysseus-odland@champion")
        assert model.metadata.get_input_schema().input_names()[:2] == ["image", "text"]
        answer = model.predict(
            pd.DataFrame([{"image": encode_frame(_odland_frame()), "text": "Level 1-1."}]),
            params={"max_new_tokens": 12, "seed": 0},
        )
        buttons = json.loads(answer["action"][0])
        assert buttons and set(buttons) <= {"a", "b", "up", "down", "left", "right", "noop"}
        assert answer["recipe"][0] == "odysseus" and isinstance(answer["text"][0], str)

        cards = mlflow.pyfunc.load_model("models:/odysseus-gtr-numberline@champion")
        image, text, legal = _card_frame()
        row = {"image": encode_frame(image), "text": text, "legal_actions": json.dumps(legal)}
        answer = cards.predict(pd.DataFrame([row]), params={"max_new_tokens": 12, "seed": 0})
        assert answer["action"][0] in legal and answer["recipe"][0] == "gtr"
        from odyssey_core.recipes.gtr.prompts import gtr_system_prompt

        assert cards.model_config["system_prompt"] == gtr_system_prompt("cards-numberline")
        assert cards.model_config["format"] == "gtr"
    finally:
        mlflow.set_tracking_uri(None)

    # what a reviewer reads on the version page
    client = MlflowClient(tracking_uri=mlflow_uri)
    mv = client.get_model_version("odysseus-odland", "1")
    assert "| mean | 10 | 0.425 |" in mv.description and "Welch t" in mv.description
    assert mv.tags["promotion.decision"] == "promoted"
    assert mv.tags["odyssey.mlflow_model"] == "pyfunc"
    assert mv.tags["checkpoint_uri"].endswith("/checkpoint")
    assert mv.tags["link.rl-odland.checkpoint"] == mv.tags["checkpoint_uri"]
    assert mv.tags["link.promote-odland.report"].endswith("/report")
    for key in ("fingerprint.stage", "fingerprint.config", "fingerprint.checkpoint"):
        assert len(mv.tags[key]) == 64
    assert mv.source.endswith("/model")
    assert int(client.get_model_version_by_alias("odysseus-odland", "champion").version) == 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_mlflow_models_serve_answers(tmp_path: Path, mlflow_uri: str, tiny_model_dir: Path) -> None:
    cfg = _cfg(tmp_path, mlflow_uri)
    assert _register(cfg, tiny_model_dir, "odland")["promoted"]
    port = _free_port()
    proc = mlflow_process(
        [
            *("models", "serve", "-m", "models:/odysseus-odland@champion"),
            *("--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"),
        ],
        tmp_path / "serve.log",
        MLFLOW_TRACKING_URI=mlflow_uri,
        OMP_NUM_THREADS="1",
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.5)
        payload = {
            "dataframe_records": [{"image": encode_frame(_odland_frame()), "text": "Level 1-1."}],
            "params": {"max_new_tokens": 8, "seed": 0},
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            body = json.loads(response.read())
        rows = body["predictions"]
        assert len(rows) == 1 and json.loads(rows[0]["action"]) and rows[0]["recipe"] == "odysseus"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its worker, by the PID we started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# -- the serving spec comes from the recipe ------------------------------------------------------


def test_the_serving_spec_is_the_recipes_for_every_recipe(tmp_path: Path) -> None:
    from odyssey_core.protocol import get_system_prompt
    from odyssey_core.recipes.espo.prompts import ESPO_SYSTEM_PROMPT
    from odyssey_core.recipes.gtr.prompts import gtr_system_prompt
    from odyssey_core.registry.pyfunc import example_frame, serving_spec

    odland = serving_spec("mario")
    assert (odland["recipe"], odland["format"], odland["env"]) == ("odysseus", "odysseus", "mario")
    assert odland["system_prompt"] == get_system_prompt("mario")
    cards = serving_spec("gtr-cards-points24", env_kwargs={"max_steps": 9})
    assert (cards["recipe"], cards["format"], cards["env"]) == ("gtr", "gtr", "cards-points24")
    assert cards["system_prompt"] == gtr_system_prompt("cards-points24", {"max_steps": 9})
    espo = serving_spec("espo-all", image_size=(112, 224))
    assert (espo["recipe"], espo["format"], espo["env"]) == ("espo", "espo", "persona")
    assert espo["system_prompt"] == ESPO_SYSTEM_PROMPT and espo["image_size"] == [112, 224]
    assert serving_spec("odland", recipe="gtr", env="cards-numberline")["format"] == "gtr"
    assert example_frame("espo").shape == (448, 224, 3)
    assert example_frame("odysseus").shape == (144, 160, 3)
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(ValueError, match="no recipe claims a model of game 'toy'"):
        serving_spec("toy", model_dir=folder)


def test_each_format_says_what_a_served_model_answers() -> None:
    from odyssey_core.protocol.formats import RESPONSE_FORMATS

    odysseus, gtr, espo = (RESPONSE_FORMATS.get(n) for n in ("odysseus", "gtr", "espo"))
    good = "<perception>a pipe</perception><reasoning>jump</reasoning><answer>[a, right]</answer>"
    assert json.loads(odysseus.serving_action(odysseus.parse(good))) == ["a", "right"]
    assert odysseus.serving_action(odysseus.parse("no tags")) == '["noop"]'
    info = {"legal_actions": ["3", "5"]}
    assert gtr.serving_action(gtr.parse('"thought": "t", "action": "5"', info), info) == "5"
    assert gtr.serving_action(gtr.parse("gibberish", info), info) == "3"  # GTR's fallback
    assert gtr.serving_action(gtr.parse("gibberish", {}), {}) == ""
    answer = "<think>tap it</think><answer>{'action': 'click', 'point': [3, 4]}</answer>"
    assert json.loads(espo.serving_action(espo.parse(answer)))["action"] == "click"
    assert espo.serving_action(espo.parse("<think>x</think>")) == ""

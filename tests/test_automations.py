"""The regression alert: the `odyssey-champion-regressed` Automation and its webhook block
(flows/automations.py), and end to end on a real `prefect server`: the nightly flow regresses,
the server's triggers and actions turn its event into one POST to a loopback HTTP sink."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_deployment_e2e import REPO, _post_json, prefect_server


def test_the_automation_turns_the_regression_event_into_a_notification() -> None:
    from prefect.events.actions import SendNotification

    from flows import automations
    from flows.nightly import REGRESSION_EVENT

    block_id = "00000000-0000-0000-0000-000000000001"
    automation = automations.regression_automation(block_id)
    assert automation.name == automations.AUTOMATION_NAME
    assert automation.trigger.expect == {REGRESSION_EVENT}
    assert automation.trigger.threshold == 1 and automation.trigger.posture == "Reactive"
    assert automation.trigger.match.root["prefect.resource.id"] == "odyssey.model.*"
    (action,) = automation.actions
    assert isinstance(action, SendNotification) and str(action.block_document_id) == block_id
    for field in ("model_name", "recorded", "current"):
        assert f"event.payload.{field}" in action.body, field


class _Sink:
    """A loopback HTTP server that records every request body it is sent."""

    def __init__(self) -> None:
        received: list[dict] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "body": json.loads(body or b"null")})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sink() -> Iterator[_Sink]:
    with _Sink() as s:
        yield s


# The nightly flow through its real code path (flow -> nightly task -> nightly_evaluate ->
# emit_event -> ChampionRegressedError) on a real registry whose champion recorded 10.0; only
# the evaluation of the checkpoint is replaced, as in tests/recipes/odysseus/test_pipeline.py.
NIGHTLY_SCRIPT = """
import sys
from odyssey_core.recipes.odysseus import pipeline
from odyssey_core.registry.models import ModelRegistry
from flows import nightly

overrides = {"run_dir": sys.argv[1]}
cfg = pipeline.load_pipeline_config("tiny", overrides)
registry = ModelRegistry(cfg.mlflow_uri)
registry.register_checkpoint("file:///ckpt/a", "odland", metrics={"eval.mean_progress": 10.0})
registry.promote("odland", [10.0, 11.0, 10.5], base_scores=[0.0, 0.5, 0.2])

def fake(cfg, model_uri, label, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.md"
    report.write_text("| champion | 0.375 |")
    return {"scores": [0.5, 0.25], "mean": 0.375, "metrics": {}, "report_dir": str(out_dir),
            "report_markdown": str(report)}

pipeline.evaluate_checkpoint = fake
try:
    nightly.nightly_eval_flow(preset="tiny", overrides=overrides)
except nightly.ChampionRegressedError as exc:
    print("regressed:", exc)
    sys.exit(0)
sys.exit("the nightly flow did not regress")
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_nightly_regression_reaches_the_webhook(tmp_path: Path, sink: _Sink) -> None:
    def python(args: list[str], env: dict[str, str], timeout: float) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return done.stdout

    with prefect_server(tmp_path) as (env, api_url):
        python(["-m", "flows.automations", "--webhook-url", sink.url], env, 120)
        # applying again updates in place: still one automation, one block
        python(["-m", "flows.automations"], {**env, "ODYSSEY_ALERT_WEBHOOK_URL": sink.url}, 120)
        autos = _post_json(f"{api_url}/automations/filter", {})
        assert [a["name"] for a in autos] == ["odyssey-champion-regressed"]
        assert autos[0]["enabled"]

        run_dir = tmp_path / "run"
        python(["-c", NIGHTLY_SCRIPT, str(run_dir)], env, 180)  # the flow run fails: a regression

        deadline = time.monotonic() + 90
        while not sink.received and time.monotonic() < deadline:
            time.sleep(0.5)
        assert sink.received, "no notification reached the webhook sink"
        time.sleep(5)  # nothing more follows the one message
        runs = _post_json(f"{api_url}/flow_runs/filter", {})
    assert len(sink.received) == 1, sink.received
    (message,) = sink.received
    assert message["path"] == "/hook"
    text = message["body"]["text"]
    assert "odysseus-odland" in message["body"]["subject"]
    assert "odysseus-odland v1" in text
    assert "mean_progress 10.0" in text and "today's 0.375" in text, text
    nightly_runs = [r for r in runs if r["state_type"] == "FAILED"]
    assert len(nightly_runs) == 1, [(r["name"], r["state_type"]) for r in runs]

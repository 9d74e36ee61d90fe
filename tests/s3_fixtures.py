"""Test fixtures for the registry: a real moto S3 server over HTTP, a fault-injecting HTTP proxy
in front of it, and a pre-migrated MLflow SQLite database copied per test.

A test module loads them with ``pytest_plugins = ["tests.s3_fixtures"]`` (conftest.py is not
ours to change); import nothing else from here at run time, or pytest cannot rewrite its asserts.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "content-length",
}


class FaultProxy:
    """A tiny threaded HTTP proxy to one upstream; ``fail_next`` makes the next matching
    requests answer an S3-style error instead of reaching the upstream (the request body is read
    first, as a real server would)."""

    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.lock = threading.Lock()
        self.rules: list[dict[str, object]] = []
        self.log: list[tuple[str, str, int]] = []  # (method, path, status) as answered
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive and 100-continue, like boto3 expects

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                rule = proxy._match(self.command, self.path)
                if rule is not None:
                    status = int(rule["status"])  # type: ignore[arg-type]
                    payload = (
                        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{rule['code']}"
                        f"</Code><Message>injected by the test proxy</Message></Error>"
                    ).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    proxy._record(self.command, self.path, status)
                    return
                conn = http.client.HTTPConnection(
                    proxy.upstream_host, proxy.upstream_port, timeout=60
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                # HEAD has no body but must announce the object's real length.
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()
                proxy._record(self.command, self.path, response.status)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(
        self,
        method: str,
        count: int = 1,
        status: int = 503,
        code: str = "SlowDown",
        path_contains: str = "",
    ) -> None:
        with self.lock:
            self.rules.append(
                {
                    "method": method,
                    "left": count,
                    "status": status,
                    "code": code,
                    "path": path_contains,
                }
            )

    def _match(self, method: str, path: str) -> dict[str, object] | None:
        with self.lock:
            for rule in self.rules:
                if rule["method"] == method and str(rule["path"]) in path and rule["left"]:
                    rule["left"] = int(rule["left"]) - 1  # type: ignore[call-overload]
                    return rule
        return None

    def _record(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self.log.append((method, path, status))

    def start(self) -> FaultProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """A real moto S3 server on a free loopback port, for the whole test module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials from the environment (moto accepts any); nothing from ~/.aws."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fault_proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_endpoint).start()
    try:
        yield proxy
    finally:
        proxy.stop()


# -- MLflow -------------------------------------------------------------------------------------

_TEMPLATE: dict[str, Path] = {}
_TEMPLATE_LOCK = threading.Lock()


def _template_db() -> Path:
    """Creating MLflow's schema runs dozens of migrations (~15 s on a busy 2-core box): do it
    once per test process and copy the file into each test."""
    with _TEMPLATE_LOCK:
        if "db" not in _TEMPLATE:
            from mlflow.tracking import MlflowClient

            folder = Path(tempfile.mkdtemp(prefix="odyssey-mlflow-template-"))
            db = folder / "mlflow.db"
            client = MlflowClient(tracking_uri=f"sqlite:///{db}")
            client.search_experiments()  # forces the schema creation
            _TEMPLATE["db"] = db
        return _TEMPLATE["db"]


@pytest.fixture
def mlflow_uri(tmp_path: Path) -> str:
    """A fresh SQLite-backed MLflow tracking URI (a copy of a migrated template database)."""
    target = tmp_path / "mlflow" / "mlflow.db"
    target.parent.mkdir(parents=True)
    shutil.copyfile(_template_db(), target)
    return f"sqlite:///{target}"


@pytest.fixture
def mlflow_artifact_root(tmp_path: Path) -> str:
    root = tmp_path / "mlartifacts"
    root.mkdir()
    return root.as_uri()

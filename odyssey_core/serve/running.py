"""Running a server: uvicorn that stops generating the moment it is told to stop, in a thread
(tests, in-process rollouts) or as a child process (``odyssey serve``, ``vllm serve``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import uvicorn

__all__ = ["ServerProcess", "ServerThread", "StoppingServer", "free_port"]


class StoppingServer(uvicorn.Server):
    """A uvicorn server that calls ``on_exit`` as soon as it is asked to stop (SIGTERM,
    SIGINT, :meth:`ServerThread.stop`), before it waits for the requests in flight: the app
    then ends its running generation at the next token and answers what waits with 503, so
    the wait (bounded by ``timeout_graceful_shutdown``) is short."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None = None):
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.on_exit is not None:
            self.on_exit()
        super().handle_exit(sig, frame)


def _stop_hook(app: Any) -> Callable[[], None] | None:
    batcher = getattr(getattr(app, "state", None), "batcher", None)
    return getattr(batcher, "request_stop", None)


class ServerThread:
    """Runs an app with uvicorn in a background thread (tests, in-process rollouts).

    ``port=0`` picks a free port; ``url`` is ``http://host:port`` once started. Use as a
    context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Bind here, before the thread starts, so the port is known and cannot be taken.
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=5
        )
        self.server = StoppingServer(config, on_exit=_stop_hook(app))
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.server.on_exit is not None:
            self.server.on_exit()
        self.server.should_exit = True
        self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (another process may still take it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A model server as a child process (``odyssey serve``, ``vllm serve``): started in its
    own session with its output in ``log``, ready once ``GET <url>/health`` answers 200, and
    stopped by its process group id (SIGTERM, then SIGKILL). Use as a context manager."""

    def __init__(
        self, command: Sequence[str], url: str, log: str | Path, *, env: dict | None = None
    ) -> None:
        self.command, self.url, self.log = list(command), url.rstrip("/"), Path(log)
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def odyssey(
        cls,
        checkpoint: str | Path,
        log: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> ServerProcess:
        """``odyssey serve checkpoint`` from this Python environment on ``host:port``;
        ``env`` is added to this process's environment (keys go there, not in ``args``,
        where ``ps`` would show them)."""
        port = port or free_port(host)
        odyssey = Path(sys.executable).with_name("odyssey")
        command = [str(odyssey), "serve", str(checkpoint), "--host", host, "--port", str(port)]
        child_env = None if env is None else {**os.environ, **env}
        url_host = f"[{host}]" if ":" in host else host
        return cls([*command, *args], f"http://{url_host}:{port}", log, env=child_env)

    @property
    def base_url(self) -> str:
        """The OpenAI API root."""
        return self.url + "/v1"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the server is not started")
        return self.process.pid

    def start(self, timeout: float = 120.0) -> ServerProcess:
        with self.log.open("wb") as out:  # the child keeps its own copy of the file
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command[0]} exited early:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.command[0]} did not start in {timeout}s:\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""

    def stop(self, timeout: float = 20.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the group is its own
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

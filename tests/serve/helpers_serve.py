"""Shared by the `odyssey serve` tests: the real command as a child process, request bodies,
real PNG images, the server's peak memory."""

from __future__ import annotations

import base64
import io
import os
import sys
from pathlib import Path

import httpx
from PIL import Image

from odyssey_core.serve.app import ServerProcess, free_port

MODEL = "tiny"
TIMEOUT_S = 60.0
KEY_VARIABLES = ("ODYSSEY_API_KEY", "ODYSSEY_ADMIN_KEY")


def odyssey_serve(
    checkpoint: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """``odyssey serve checkpoint`` on a free loopback port with one torch thread; ``env``
    (keys) over this process's environment. Not started yet."""
    port = free_port()
    odyssey = Path(sys.executable).with_name("odyssey")
    command = [
        str(odyssey), "serve", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
        "--model-name", MODEL, "--threads", "1", "--log-level", "warning", *args,
    ]  # fmt: skip
    # Keys only from ``env``: never one this shell happens to export.
    child_env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    child_env.update({"OMP_NUM_THREADS": "1", **(env or {})})
    return ServerProcess(command, f"http://127.0.0.1:{port}", log, env=child_env)


def png_data_url(width: int, height: int, mode: str = "RGB", color: int | tuple = 0) -> str:
    """A real PNG of one colour as a data URL (a huge one compresses to a few KiB)."""
    buffer = io.BytesIO()
    Image.new(mode, (width, height), color).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat_body(text: str = "hi", *image_urls: str, **extra: object) -> dict:
    content: list[dict] = [{"type": "image_url", "image_url": {"url": u}} for u in image_urls]
    content.append({"type": "text", "text": text})
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 4,
        **extra,
    }


def post_chat(
    url: str, body: dict, *, key: str | None = None, timeout: float = TIMEOUT_S
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=timeout)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")

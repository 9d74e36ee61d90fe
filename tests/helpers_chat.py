"""An OpenAI-compatible chat-completions endpoint on a free local port, in this process, for the
teacher tests: a subclass's :meth:`FakeChatServer.answer` decides each reply, and the base
keeps the HTTP, the JSON and the counts."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ChatRequest:
    body: dict[str, Any]
    image: str  # the last message's first image URL ("" when it has none)
    attempt: int  # how often this image has been asked, this request included
    number: int  # how many requests the server has had, this one included


@dataclass(frozen=True)
class ChatReply:
    status: int = 200
    text: str | None = ""
    finish_reason: str = "stop"
    prompt_tokens: int = 10
    completion_tokens: int = 10
    # the error object of a reply that is not 200 (sent with Retry-After: 0)
    error: dict[str, Any] = field(default_factory=lambda: {"message": "try later"})
    delay_s: float = 0.0  # held this long before it is sent (past a client's timeout)
    tool_calls: list[dict[str, Any]] | None = None  # sent with finish reason "tool_calls"


def _image_of(body: dict[str, Any]) -> str:
    with contextlib.suppress(KeyError, IndexError, TypeError):
        return str(body["messages"][-1]["content"][0]["image_url"]["url"])
    return ""


class FakeChatServer:
    """``POST /v1/chat/completions`` answered by :meth:`answer`; every request body is kept in
    ``bodies`` and every image's count in ``hits``."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                image = _image_of(body)
                with owner.lock:
                    owner.bodies.append(body)
                    owner.hits[image] += 1
                    request = ChatRequest(body, image, owner.hits[image], len(owner.bodies))
                reply = owner.answer(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = json.dumps(owner.payload(body, reply)).encode()
                # the client may have timed out and gone already
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(reply.status)
                    if reply.status != 200:
                        self.send_header("Retry-After", "0")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, request: ChatRequest) -> ChatReply:
        raise NotImplementedError

    @staticmethod
    def payload(body: dict[str, Any], reply: ChatReply) -> dict[str, Any]:
        if reply.status != 200:
            return {"error": reply.error}
        tokens = reply.prompt_tokens + reply.completion_tokens
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls" if reply.tool_calls else reply.finish_reason,
                    "message": message,
                }
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": tokens,
            },
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return len(self.bodies)

    def __enter__(self) -> FakeChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

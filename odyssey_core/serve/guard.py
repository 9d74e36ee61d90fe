"""The checks every request passes before a route sees it (one pure ASGI middleware, so a
client learns nothing from body validation before it is allowed in):

1. **Host.** Where the server checks hosts (loopback binds), a ``Host`` header that names
   neither a loopback address nor an allowed name is a 400: a web page that rebinds its own
   DNS name to 127.0.0.1 cannot reach the server from the browser.
2. **Keys.** ``/v1/*`` and ``/metrics`` need the API key when one is set (the admin key is
   accepted too). The weight routes (``/v1/weights/*``) are off (403) unless the server has
   a weights root and a key; they need the admin key if one is set, else the API key.
3. **Admission.** A chat request beyond what the server holds is answered 503 with
   ``Retry-After`` before its body is read.
4. **Body size.** A body over ``max_body_bytes`` is a 413, by ``Content-Length`` or, for a
   chunked upload, as soon as the bytes read pass the bound. The body is read here, then
   handed to the route, and the route's later ``receive`` calls see the client leave.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from odyssey_core.serve import is_loopback
from odyssey_core.serve.batching import Batcher
from odyssey_core.serve.errors import APIError

__all__ = ["CHAT_PATH", "WEIGHTS_PREFIX", "Guard", "host_name"]

CHAT_PATH = "/v1/chat/completions"
WEIGHTS_PREFIX = "/v1/weights"


def host_name(header: str | None) -> str | None:
    """The host of a ``Host`` header without its port (``[::1]:8000`` -> ``::1``), lower
    case; None when absent or malformed."""
    if not header:
        return None
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not value[end + 1 :].startswith(":")):
            return None
        return value[1:end]
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name or None
    return value if ":" not in value else None


class Guard:
    """The ASGI middleware described in this module's docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        batcher: Batcher,
        max_body_bytes: int,
        api_key: str | None = None,
        admin_key: str | None = None,
        weights_enabled: bool = False,
        trusted_hosts: Iterable[str] | None = None,
    ) -> None:
        self.app = app
        self.batcher = batcher
        self.max_body_bytes = max_body_bytes
        self.api_key = api_key or None
        self.admin_key = admin_key or None
        self.weights_enabled = weights_enabled
        self.trusted_hosts = (
            None if trusted_hosts is None else frozenset(h.lower() for h in trusted_hosts)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        error = self._host_error(headers) or self._key_error(scope["path"], headers)
        if error is not None:
            await error.response()(scope, receive, send)
            return
        admitted = scope["path"] == CHAT_PATH and scope["method"] == "POST"
        if admitted:
            try:
                self.batcher.admit()
            except APIError as refused:
                await refused.response()(scope, receive, send)
                return
        try:
            body = await self._read_body(headers, receive)
            if isinstance(body, APIError):
                await body.response()(scope, receive, send)
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            if admitted:
                self.batcher.release()

    def _host_error(self, headers: Headers) -> APIError | None:
        if self.trusted_hosts is None:
            return None
        name = host_name(headers.get("host"))
        if name is not None and (is_loopback(name) or name in self.trusted_hosts):
            return None
        return APIError(
            400,
            "this server does not answer to that Host header (it accepts loopback names and "
            "addresses, and the names given with odyssey serve --allowed-host)",
            code="untrusted_host",
        )

    def _key_error(self, path: str, headers: Headers) -> APIError | None:
        if path.startswith(WEIGHTS_PREFIX + "/") or path == WEIGHTS_PREFIX:
            if not self.weights_enabled:
                return APIError(
                    403,
                    "weight reloads are off on this server: start it with --weights-root DIR "
                    "and a key (ODYSSEY_ADMIN_KEY, or ODYSSEY_API_KEY) to turn them on",
                    type="permission_error",
                    code="weights_disabled",
                )
            return self._bearer_error(headers, [self.admin_key or self.api_key])
        if path.startswith("/v1/") or path == "/v1" or path == "/metrics":
            if self.api_key is None:
                return None
            return self._bearer_error(headers, [self.api_key, self.admin_key])
        return None

    @staticmethod
    def _bearer_error(headers: Headers, keys: list[str | None]) -> APIError | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        given = token.strip().encode()
        # Every key compared in constant time, so response timing does not leak a key.
        matches = [hmac.compare_digest(given, key.encode()) for key in keys if key]
        if scheme.lower() == "bearer" and any(matches):
            return None
        return APIError(
            401,
            "missing or invalid API key: send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
        )

    async def _read_body(self, headers: Headers, receive: Receive) -> bytes | APIError:
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                return APIError(
                    400, "the Content-Length header is not a number", code="invalid_header"
                )
            if int(length) > self.max_body_bytes:
                return self._too_large()
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"".join(chunks)  # the route sees the disconnect next
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> APIError:
        return APIError(
            413,
            f"the request body is larger than this server's {self.max_body_bytes} bytes "
            "(odyssey serve --max-body-mb); send smaller images or fewer messages",
            code="request_too_large",
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the route the body read already, then the client's own
    messages (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            message: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
            return message
        return await receive()

    return replay

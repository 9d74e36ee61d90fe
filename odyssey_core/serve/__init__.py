"""Serving a local policy over an OpenAI-compatible HTTP API (``odyssey serve``).

Importing this package is cheap; ``create_app`` and friends live in
:mod:`odyssey_core.serve.app` (FastAPI, torch) and are imported on first use. The pieces:
``schema`` (request bodies), ``limits`` (every bound), ``guard`` (Host, keys, admission, body
size), ``images`` (header-checked decoding), ``chat`` (prompt preparation and the batched
policy), ``batching`` (the queue and the generation thread), ``weights`` (weight folders
read inside a root), ``errors`` (OpenAI-format errors, summarised 500s), ``running``
(uvicorn in a thread or a child process) and ``cli`` (the command).
"""

from __future__ import annotations

import ipaddress

from odyssey_core.common.lazy import lazy_exports

# Heavy names (FastAPI, torch), imported from odyssey_core.serve.app on first access.
_LAZY = lazy_exports(
    __name__,
    {
        "odyssey_core.serve.app": (
            "ChatHFPolicy",
            "ChatItem",
            "ServerThread",
            "create_app",
            "messages_to_chat",
        )
    },
)

__all__ = [*_LAZY.names, "InsecureBindError", "check_bind_security", "is_loopback"]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class InsecureBindError(ValueError):
    """Binding beyond loopback without an API key."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ``::1``)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # any other name (or "") may mean a public interface


def check_bind_security(host: str, api_key: str | None) -> None:
    """Refuse to serve on a non-loopback address (e.g. 0.0.0.0) without an API key."""
    if not is_loopback(host) and not api_key:
        raise InsecureBindError(
            f"refusing to listen on {host!r} without an API key: anyone who can reach this "
            "machine could use the model. Pass --api-key KEY (or set ODYSSEY_API_KEY), or "
            "bind to 127.0.0.1."
        )


__getattr__, __dir__ = _LAZY.getattr, _LAZY.dir

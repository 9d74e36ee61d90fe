"""What is recorded about a run must not carry secrets: URL userinfo and secret query values are
redacted (:func:`redact_uri`), and an exception becomes one bounded line
(:func:`summarise_error`) instead of its raw text.

MLflow params and tags, version tags, log lines and reports are read by everyone who can open
the tracking server, so a tracking URI such as ``http://user:pass@mlflow:5000`` or an endpoint
with a token in its query is recorded as ``http://***@mlflow:5000`` and ``...?token=***``.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "redact_paths", "redact_uri", "summarise_error"]

REDACTED = "***"

# scheme://userinfo@ : the userinfo runs to the last '@' before the authority ends ('/', '?',
# '#' or whitespace), so an unencoded '@' in a password is covered too
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#]*@")
# ?token=... / &password=... and the like (presigned URLs' signatures and credentials too)
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&](?:[\w.\-]*(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key"
    r"|signature|credential|sig)[\w.\-]*)=)[^&#\s]*",
    re.IGNORECASE,
)
# an absolute POSIX path that is not part of a URL (no word, ':' or '/' right before it)
_PATH_PART = r"[^\s/'\":,;()\[\]{}<>]+"
_ABSOLUTE_PATH = re.compile(rf"(?<![\w:/.\-~])/(?:{_PATH_PART}/)*{_PATH_PART}")


def redact_uri(text: str) -> str:
    """``text`` (a URI, or any text that contains URIs) with every URL's userinfo replaced by
    ``***`` (``https://user:pass@host/x`` -> ``https://***@host/x``) and the values of secret
    query parameters (``token``, ``password``, ``api_key``, ``signature``, ...) replaced by
    ``***``. Text without either comes back unchanged."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m['key']}{REDACTED}", text)


def redact_paths(text: str) -> str:
    """``text`` with each absolute filesystem path cut to its last part (``/home/me/x/a.bin``
    -> ``.../a.bin``): what an answer to a remote client says about this machine's files."""
    return _ABSOLUTE_PATH.sub(lambda m: ".../" + m.group(0).rsplit("/", 1)[-1], text)


def summarise_error(error: BaseException, *, limit: int = 300, hide_paths: bool = False) -> str:
    """One line for a tag, a log or an answer: the exception's type and the first line of its
    message (``RuntimeError: loss diverged``), URIs redacted, at most ``limit`` characters.
    A first line that ends with ``:`` introduces a list, so the next lines follow it, joined
    by ``; ``; how many lines were left out is said. ``hide_paths`` also cuts absolute paths
    to their last part (:func:`redact_paths`), for answers sent to remote clients."""
    if limit < 20:
        raise ValueError(f"limit must be at least 20 characters, got {limit}")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    kept = lines[:1]
    if kept and kept[0].endswith(":"):
        kept = lines
    text = type(error).__name__
    if kept:
        text += ": " + kept[0] + (" " + "; ".join(kept[1:]) if len(kept) > 1 else "")
    text = redact_uri(text)
    if hide_paths:
        text = redact_paths(text)
    left_out = len(lines) - len(kept)
    suffix = f" (+{left_out} more lines)" if left_out else ""
    if len(text) + len(suffix) > limit:
        suffix = "... [cut]" + suffix
        text = text[: max(0, limit - len(suffix))].rstrip()
    return text + suffix

"""Errors in OpenAI's format, and internal failures summarised for the client.

Every answer that is not a 200 carries ``{"error": {message, type, param, code}}``. A 4xx says
what was wrong with the request and what to do; a 500 says only that the server failed and
gives an error id: the exception itself (its text can hold paths, tensor names or library
internals) goes to the server's log under that id, never into the body.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi.responses import JSONResponse

__all__ = ["APIError", "internal_error", "log"]

log = logging.getLogger("odyssey.serve")


class APIError(Exception):
    """An error answered in OpenAI's format: ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )
        self.headers = dict(headers or {})
        if status == 401:
            self.headers.setdefault("WWW-Authenticate", "Bearer")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers or None)


def internal_error(error: BaseException, doing: str) -> APIError:
    """A 500 for ``error`` raised while ``doing`` something: the traceback goes to the log
    under a fresh error id, the client gets the id and a summary only."""
    error_id = uuid.uuid4().hex[:12]
    log.error("error %s while %s", error_id, doing, exc_info=error)
    return APIError(
        500,
        f"the server failed while {doing} (error id {error_id}); the server's log has the "
        "details. Retry later, or report the error id to whoever runs the server.",
        type="server_error",
        code="internal_error",
    )

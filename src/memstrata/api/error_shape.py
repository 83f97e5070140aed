"""The one shape of every error body and its JSON response.

Every 4xx/5xx body is ``{"code", "detail", "message"}`` (``api.errors`` says which error
gets which); the pieces that build it live apart from the mapping so that what answers
errors outside a route (a body timeout, a shutdown, the MCP SDK's answers) and the 422s
(``api.validation_errors``) build the same shape without importing the whole mapping.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

# The code of a status when nothing more specific applies.
STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "version_conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    500: "internal_error",
    503: "unavailable",
}


@dataclass(frozen=True)
class HttpError:
    """The HTTP form of an exception: status, JSON body, extra headers."""

    status_code: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> JSONResponse:
        return _ErrorResponse(self.body, status_code=self.status_code, headers=self.headers or None)


class _ErrorResponse(JSONResponse):
    """An error body may echo what the client sent (a batch turn's ``session_id``): text
    UTF-8 cannot encode (a lone surrogate, sent as ``\\ud800`` in JSON) goes back escaped
    the same way instead of failing the response."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_body(
    status_code: int, detail: str, *, code: str | None = None, message: str | None = None
) -> dict[str, Any]:
    """The one error shape: ``code``, ``detail`` and an English ``message``."""
    return {
        "code": code or STATUS_CODES.get(status_code, "error"),
        "detail": detail,
        "message": message or detail,
    }


def http_error(
    status_code: int,
    detail: str,
    *,
    code: str | None = None,
    message: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> HttpError:
    body = {**error_body(status_code, detail, code=code, message=message), **extra}
    return HttpError(status_code, body, dict(headers or {}))

"""Every domain error → HTTP status and body, in one place.

Error bodies always have a string ``detail`` (FastAPI's convention, so clients need one
parser); 409 and 422 add machine-readable fields:

- 400 ``InvalidFileTypeError`` (a ValueError; the name is not user/soul/memory), spec §3
  byte for byte: ``{"detail": "无效的文件名"}``
- 400 any other ValueError, a malformed ``If-Match``: ``{"detail": "<message>"}``
- 401 missing or bad bearer token, with ``WWW-Authenticate: Bearer``: ``{"detail": "<why>"}``
- 404 ``UnknownSkillError``, unknown path: ``{"detail": "<message>"}``
- 409 ``VersionConflictError`` (a RuntimeError, spec §4):
  ``{"detail": "<message>", "expected_version": 3, "current_version": 4}``
- 413 request body over ``max_request_bytes``, or ``ContentTooLargeError`` (content over
  ``max_content_bytes``): ``{"detail": "<sizes and the setting to raise>"}``
- 422 body validation (pydantic, malformed JSON) or ``InvalidContentError``:
  ``{"detail": "invalid request: <summary>", "errors": [{"loc", "msg", "type"}]}``
- 503 runtime not started, or a database / sandbox / embedding failure that escaped the
  service layer: ``{"detail": "<message>"}``
- 500 anything else (logged with its traceback): ``{"detail": "internal server error"}``

Sandbox and embedding failures are the sync / retrieval layers' to swallow (spec §5: log
a warning, never block the main flow); if one escapes, it is a 503, never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memstrata.errors import (
    ContentTooLargeError,
    DatabaseSetupError,
    EmbeddingError,
    InvalidContentError,
    InvalidFileTypeError,
    SandboxError,
    UnknownSkillError,
    VersionConflictError,
)
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

INVALID_FILE_NAME = "无效的文件名"  # spec §3: the 400 body's message, verbatim
INTERNAL_ERROR = "internal server error"


class ApiError(Exception):
    """A transport-level error with its HTTP form (bad header, body too large, 401, 503)."""

    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


@dataclass(frozen=True)
class HttpError:
    """The HTTP form of an exception: status, JSON body, extra headers."""

    status_code: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status_code, headers=self.headers or None)


def _detail(status_code: int, detail: str, **extra: Any) -> HttpError:
    return HttpError(status_code, {"detail": detail, **extra})


def map_exception(exc: BaseException) -> HttpError | None:
    """The HTTP form of ``exc``, or None for exceptions that are bugs (→ 500)."""
    if isinstance(exc, ApiError):
        return HttpError(exc.status_code, {"detail": exc.detail, **exc.extra}, exc.headers)
    if isinstance(exc, RequestValidationError):
        return validation_error(exc.errors())
    if isinstance(exc, StarletteHTTPException):
        return HttpError(exc.status_code, {"detail": str(exc.detail)}, dict(exc.headers or {}))
    if isinstance(exc, InvalidFileTypeError):
        return _detail(400, INVALID_FILE_NAME)
    if isinstance(exc, VersionConflictError):
        return _detail(409, str(exc), expected_version=exc.expected, current_version=exc.actual)
    if isinstance(exc, ContentTooLargeError):
        return _detail(413, str(exc))
    if isinstance(exc, InvalidContentError):
        return _detail(422, str(exc), errors=[])
    if isinstance(exc, UnknownSkillError):
        return _detail(404, str(exc))
    if isinstance(exc, SandboxError | EmbeddingError):
        # Checked before ValueError: SandboxPathError is both.
        return _detail(503, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, DatabaseSetupError | OperationalError):
        return _detail(503, "the database is unavailable; try again shortly")
    if isinstance(exc, ValueError):  # spec §5: ValueError → HTTP 400
        return _detail(400, str(exc) or type(exc).__name__)
    return None


def validation_error(errors: Sequence[Any]) -> HttpError:
    """422 with a one-line summary and the pydantic errors (without echoing the input)."""
    items = [_error_item(error) for error in errors if isinstance(error, Mapping)]
    summary = "; ".join(
        f"{'.'.join(item['loc']) or 'request'}: {item['msg']}" for item in items[:5]
    )
    return _detail(422, f"invalid request: {summary or 'malformed body'}", errors=items)


def _error_item(error: Mapping[str, Any]) -> dict[str, Any]:
    loc = [str(part) for part in error.get("loc", ())]
    msg = str(error.get("msg", "invalid value"))
    kind = str(error.get("type", "value_error"))
    if kind == "json_invalid":  # FastAPI puts the character offset in loc
        ctx = error.get("ctx")
        reason = ctx.get("error") if isinstance(ctx, Mapping) else None
        msg = f"malformed JSON at character {loc[-1] if len(loc) > 1 else 0}: {reason or msg}"
        loc = ["body"]
    return {"loc": loc, "msg": msg, "type": kind}


def error_response(exc: BaseException) -> JSONResponse | None:
    mapped = map_exception(exc)
    if mapped is None:
        return None
    if mapped.status_code >= 500:
        log_event(
            logger,
            "http.error",
            logging.WARNING,
            status=mapped.status_code,
            error=type(exc).__name__,
            detail=str(exc),
        )
    return mapped.response()


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    response = error_response(exc)
    if response is not None:
        return response
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": INTERNAL_ERROR}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """App-level handlers for what happens outside our routes (404s, 405s, middleware).

    Errors inside our routes are mapped by the route class (:mod:`memstrata.api.routing`),
    so the same mapping applies when the router is mounted into a host platform's app.
    """
    for exc_type in (StarletteHTTPException, RequestValidationError, ApiError, Exception):
        app.add_exception_handler(exc_type, _handle)

"""Every domain error → HTTP status and body, in one place.

Every 4xx/5xx body has one shape: ``{"code": <machine-readable>, "detail": <text>,
"message": <English text>}``. ``detail`` keeps the spec's own words where it gives them
(``无效的文件名``); ``message`` says the same in English and how to fix it (for most
errors the two are the same English text). 409 and 422 add fields:

- 400 ``invalid_file_name`` (``InvalidFileTypeError``; the name is not user/soul/memory),
  spec §3: ``detail`` is ``无效的文件名`` byte for byte
- 400 ``bad_request``: any other ValueError, a malformed ``If-Match``, a client that hung
  up before sending its whole body;
  ``value_out_of_range``: a value the database cannot store (``DataError``)
- 401 ``unauthorized``: missing or bad bearer token, with ``WWW-Authenticate: Bearer``
  (checked before the body is parsed)
- 404 ``not_found``: ``UnknownSkillError``, unknown path; 405 ``method_not_allowed``,
  naming every method the path takes (``Allow`` too)
- 409 ``version_conflict`` (``VersionConflictError``, a RuntimeError, spec §4): adds
  ``expected_version`` and ``current_version``, and ``same_content: true`` when the
  current version holds the text the refused write sent
- 413 ``payload_too_large``: request body over ``max_request_bytes``, or content over
  ``max_content_bytes``
- 422 ``validation_error``: body validation (pydantic, malformed JSON, a body that is not
  UTF-8, nested too deeply or holds a number too long to decode, a body not sent as
  ``application/json``) or ``InvalidContentError``; adds ``errors: [{"loc", "msg", "type"}]``,
  each ``msg`` in the reader's words (:mod:`memstrata.api.input_errors`; ``loc`` and
  ``type`` are pydantic's), an ``InvalidContentError``'s one item with its field's ``loc``.
  Not 415 for a wrong ``Content-Type``: spec §3 names no such status and every other
  unreadable body is a 422, so a client handles one status for "fix the body"
- 429 ``too_many_sessions``: ``/mcp`` only, a user's MCP session cap (memstrata.mcp.sessions)
- 503 ``unavailable``: runtime not started, or a sandbox / embedding failure that escaped
  the service layer; ``database_unavailable``: the database unreachable, or every pooled
  connection busy, with ``Retry-After``; and ``outcome: "unknown"`` when the database was
  lost while the write's COMMIT awaited its answer (it may be stored: the detail says how
  to find out); ``shutting_down``: a request still running when the
  shutdown's grace ended (memstrata.api.shutdown), with ``Retry-After``;
  ``database_read_only``: the database refused this server's statement for lack of a
  privilege (SQLSTATE 42501) or because it is read-only (25006: a hot standby,
  ``default_transaction_read_only``), logged as one ERROR line that names the fix, with
  the same ``Retry-After``
- 500 ``internal_error``: anything else (logged with its traceback)

The body is built by ``api.error_shape``, the 422s' items by ``api.validation_errors``.

Sandbox and embedding failures are the sync / retrieval layers' to swallow (spec §5: log
a warning, never block the main flow); if one escapes, it is a 503, never a 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from memstrata.api.api_error import ApiError as ApiError
from memstrata.api.error_shape import HttpError, error_body, http_error
from memstrata.api.input_errors import Taker, body_taker, content_item
from memstrata.api.validation_errors import undecodable_body, validation_error
from memstrata.db.engine import READ_ONLY_SQLSTATE
from memstrata.db.in_flight import CommitOutcomeUnknownError
from memstrata.db.migrate import INSUFFICIENT_PRIVILEGE
from memstrata.errors import (
    ContentTooLargeError,
    DatabaseSetupError,
    EmbeddingError,
    InvalidContentError,
    InvalidFileTypeError,
    RuntimeClosedError,
    SandboxError,
    UnknownSkillError,
    VersionConflictError,
)
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

INVALID_FILE_NAME = "无效的文件名"  # spec §3: the 400 body's message, verbatim
INVALID_FILE_NAME_MESSAGE = "invalid file name: use one of user, soul, memory"
INTERNAL_ERROR = "internal server error"
# Retry-After of the database's 503s, database_unavailable and database_read_only: a
# restart or a failover's switch (the URL still reaching the demoted, read-only primary)
# takes seconds, and the pool already waited up to 10 s for a connection, so a retry
# within the second would add load to a database that is struggling. A refusal only an
# operator can end (revoked grants) gets it too: retries every few seconds cost nothing.
DATABASE_RETRY_AFTER_S = 5


def map_exception(exc: BaseException, body: Taker | None = None) -> HttpError | None:
    """The HTTP form of ``exc``, or None for exceptions that are bugs (→ 500). ``body``:
    the body the route takes, whose fields a 422 names (:func:`body_taker`)."""
    if isinstance(exc, ApiError):
        return http_error(
            exc.status_code, exc.detail, code=exc.code, headers=exc.headers, **exc.extra
        )
    if isinstance(exc, RequestValidationError):
        return validation_error(exc.errors(), body)
    if isinstance(exc, ClientDisconnect):
        # Nobody reads this answer; it keeps a client's hang-up out of the 5xx count and
        # the error log.
        return http_error(400, "the client closed the connection before sending the whole body")
    if isinstance(exc, StarletteHTTPException):
        return undecodable_body(exc) or http_error(
            exc.status_code, _http_detail(exc), headers=exc.headers
        )
    if isinstance(exc, InvalidFileTypeError):
        return http_error(
            400, INVALID_FILE_NAME, code="invalid_file_name", message=INVALID_FILE_NAME_MESSAGE
        )
    if isinstance(exc, VersionConflictError):
        # ``same_content`` only when true: every other 409 keeps spec §4's body.
        fields: dict[str, Any] = {
            "expected_version": exc.expected,
            "current_version": exc.actual,
        }
        if exc.same_content:
            fields["same_content"] = True
        return http_error(409, str(exc), **fields)
    if isinstance(exc, ContentTooLargeError):
        return http_error(413, str(exc))
    if isinstance(exc, InvalidContentError):
        return http_error(422, str(exc), errors=[content_item(exc, body)])
    if isinstance(exc, UnknownSkillError):
        return http_error(404, str(exc))
    if _refused_write(exc) is not None:
        return _database_refusal(
            "the database refuses this server's writes; try again later", "database_read_only"
        )
    if isinstance(exc, SandboxError | EmbeddingError):
        # Checked before ValueError: SandboxPathError is both.
        return http_error(503, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, CommitOutcomeUnknownError):
        # Not "try again": the write may be stored; its detail says how to find out.
        return _database_refusal(str(exc), "database_unavailable", outcome="unknown")
    # PoolTimeoutError: every pooled connection busy (a lock held, a flood of one user's
    # writes) for db.engine.POOL_TIMEOUT_S; a 500 with a traceback before.
    if isinstance(exc, DatabaseSetupError | OperationalError | PoolTimeoutError):
        return _database_refusal(
            "the database is unavailable; try again shortly", "database_unavailable"
        )
    if isinstance(exc, RuntimeClosedError):  # a host closed the runtime under its router
        return http_error(503, str(exc), code="unavailable")
    if isinstance(exc, DataError):
        return http_error(400, _data_error_message(exc), code="value_out_of_range")
    if isinstance(exc, ValueError):  # spec §5: ValueError → HTTP 400
        return http_error(400, str(exc) or type(exc).__name__)
    return None


def _database_refusal(detail: str, code: str, **extra: Any) -> HttpError:
    """A 503 of the database's, with its ``Retry-After``."""
    return http_error(
        503, detail, code=code, headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)}, **extra
    )


# SQLSTATE numeric_value_out_of_range: an integer over 2^31 − 1 for an ``integer`` column.
_NUMERIC_OUT_OF_RANGE = "22003"
# SQLSTATEs of a database that will not take this server's statements until an operator
# acts, each with the fix (the start-up check, memstrata.db.migrate, names the role).
_WRITE_REFUSED = {
    INSUFFICIENT_PRIVILEGE: "the database role lacks a privilege on memstrata's tables "
    "(grants lost in a restore, a read-only role): GRANT SELECT, INSERT, UPDATE, DELETE ON "
    "ALL TABLES and USAGE ON ALL SEQUENCES IN SCHEMA public to the role of "
    "MEMSTRATA_DATABASE_URL, or use the role that owns them",
    READ_ONLY_SQLSTATE: "the database is read-only (a hot standby, or "
    "default_transaction_read_only for the role or database): point MEMSTRATA_DATABASE_URL "
    "at the primary, or turn default_transaction_read_only off",
}


def _http_detail(exc: StarletteHTTPException) -> str:
    """Starlette's detail, except a plain 405's, which names the methods the path takes
    (its ``Allow`` header) so the caller knows what to send instead."""
    detail = str(exc.detail)
    allow = (exc.headers or {}).get("Allow", "")
    methods = [m.strip() for m in allow.split(",") if m.strip()]
    if exc.status_code != 405 or detail != "Method Not Allowed" or not methods:
        return detail
    listed = " or ".join([", ".join(methods[:-1]), methods[-1]] if len(methods) > 1 else methods)
    return f"{detail}: this path takes {listed}"


# The methods a 405 may name: HTTP's, without CONNECT and TRACE (no route takes them).
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowing_every_method(exc: StarletteHTTPException, scope: Scope) -> StarletteHTTPException:
    """``exc`` with an ``Allow`` header of every method some route takes at this path:
    Starlette's names only the first route that matched the path (GET of a path whose
    PUT is another route), so a caller told "this path takes GET" would never try PUT.
    Each method is tried against the app's routes as the router would match it."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", ())
    allowed = [
        method
        for method in _METHODS
        if any(
            isinstance(route, BaseRoute)
            and route.matches({**scope, "method": method})[0] == Match.FULL
            for route in routes
        )
    ]
    if not allowed or scope.get("method") in allowed:  # not the router's own 405
        return exc
    return StarletteHTTPException(
        exc.status_code, exc.detail, {**(exc.headers or {}), "Allow": ", ".join(allowed)}
    )


def _refused_write(exc: BaseException) -> str | None:
    """The fix when ``exc`` is the database refusing this server's statements, else None."""
    if not isinstance(exc, DBAPIError):
        return None
    return _WRITE_REFUSED.get(getattr(exc.orig, "sqlstate", None) or "")


def _data_error_message(exc: DataError) -> str:
    """What a ``DataError`` (a value the database refused) means, claiming a specific
    cause only when the database's SQLSTATE names it."""
    if getattr(exc.orig, "sqlstate", None) == _NUMERIC_OUT_OF_RANGE:
        return "a number in the request is out of range (integers must be below 2^31)"
    return "the database could not store or read back a value (out of range or not representable)"


def error_response(exc: BaseException, scope: Scope | None = None) -> JSONResponse | None:
    """The answer for an exception memstrata knows, else None. A 5xx is logged with its
    cause and, given the request's ``scope``, whose request it was: the ``http.request``
    line has the user but not the cause."""
    if (
        isinstance(exc, StarletteHTTPException)
        and (exc.status_code, exc.detail) == (405, "Method Not Allowed")
        and scope is not None
    ):
        exc = _allowing_every_method(exc, scope)
    mapped = map_exception(exc, body_taker(scope))
    if mapped is None:
        return None
    hint = _refused_write(exc)
    if hint is not None and isinstance(exc, DBAPIError):
        # An operator's to fix, and the statement's text would only hide the cause.
        log_event(
            logger,
            "http.error",
            logging.ERROR,
            status=mapped.status_code,
            error=type(exc.orig).__name__,
            detail=str(exc.orig).strip().splitlines()[0][:300],
            hint=hint,
            **_request_fields(scope),
        )
    elif mapped.status_code >= 500:
        log_event(
            logger,
            "http.error",
            logging.WARNING,
            status=mapped.status_code,
            error=type(exc).__name__,
            detail=str(exc),
            **_request_fields(scope),
        )
    return mapped.response()


def _request_fields(scope: Scope | None) -> dict[str, Any]:
    if scope is None:
        return {}
    state = scope.get("state")
    state = state if isinstance(state, dict) else {}
    return {
        "user_id": state.get("user_id"),
        "request_id": state.get("request_id"),
        "method": scope.get("method"),
        "path": scope.get("path"),
    }


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    response = error_response(exc, request.scope)
    if response is not None:
        return response
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body(500, INTERNAL_ERROR), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """App-level handlers for what happens outside our routes (404s, 405s, middleware).

    Errors inside our routes are mapped by the route class (:mod:`memstrata.api.routing`),
    so the same mapping applies when the router is mounted into a host platform's app.
    """
    for exc_type in (StarletteHTTPException, RequestValidationError, ApiError, Exception):
        app.add_exception_handler(exc_type, _handle)

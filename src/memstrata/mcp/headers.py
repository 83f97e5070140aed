"""Refusals for ``/mcp`` requests whose headers the SDK would refuse, said in the one error
shape with how to fix them.

The SDK's transport refuses a POST without ``Content-Type: application/json`` (400), a
``Host`` not in ``MEMSTRATA_MCP_ALLOWED_HOSTS`` (421) and an ``Origin`` not in
``MEMSTRATA_MCP_ALLOWED_ORIGINS`` (403) with a plain-text body ("Invalid Host header") that
MCP clients show as "Server returned an error response", and a POST whose ``Accept`` does
not list both of its response types with 406 and, in the 2026-07-28 era, no body at all.
:class:`HeaderChecks` runs the SDK's own check (its ``TransportSecurityMiddleware``, with
the very settings the session manager got, and its ``check_accept_headers``) so the two
cannot disagree on what passes, and turns each refusal into an :class:`ApiError` with the
same status. It runs after authentication: a request without a valid token gets the 401,
whatever else is wrong with it, as on ``/api``.
"""

from __future__ import annotations

import logging

from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope

from memstrata.api.errors import ApiError
from memstrata.logs import log_event
from memstrata.mcp.refusal_log import refusal_level

logger = logging.getLogger(__name__)

_REBINDING = (
    "This is DNS-rebinding protection; behind a proxy that checks Host and Origin itself, "
    "MEMSTRATA_MCP_DNS_REBINDING_PROTECTION=false turns it off."
)


class HeaderChecks:
    """The SDK's header checks for one ``/mcp`` endpoint, answered in the one error shape.

    ``json_response``: the session manager's setting; without it a POST must accept both
    ``application/json`` and ``text/event-stream``, since the SDK may answer with either.
    """

    def __init__(self, security: TransportSecuritySettings, *, json_response: bool) -> None:
        self._security = TransportSecurityMiddleware(security)
        self._json_response = json_response

    async def refuse(self, scope: Scope, receive: Receive, user_id: str) -> None:
        """Raise the :class:`ApiError` the request's headers earn, if any, and log it; the
        body is not read."""
        request = Request(scope, receive)
        is_post = request.method == "POST"
        refusal = await self._security.validate_request(request, is_post=is_post)
        error: ApiError | None
        if refusal is not None:
            error = _from_sdk(refusal.status_code, bytes(refusal.body), request)
        elif is_post:
            error = self._unacceptable(request)
        else:
            error = None
        if error is None:
            return
        log_event(
            logger,
            "mcp.refused",
            refusal_level(error.status_code),
            user_id=user_id,
            status=error.status_code,
            error=error.detail,
        )
        raise error

    def _unacceptable(self, request: Request) -> ApiError | None:
        has_json, has_sse = check_accept_headers(request)
        if has_json and (has_sse or self._json_response):
            return None
        types = [("application/json", has_json)]
        if not self._json_response:
            types.append(("text/event-stream", has_sse))
        wanted = ", ".join(name for name, _ in types)
        lacking = " and ".join(name for name, listed in types if not listed)
        accept = request.headers.get("accept")
        sent = (
            f"Accept {accept[:200]!r} lacks {lacking}"
            if accept
            else "the request has no Accept header"
        )
        why = (
            ""
            if self._json_response
            else " (both: a request is answered with JSON or an event stream)"
        )
        return ApiError(406, f"{sent}: send Accept: {wanted}{why}")


def _from_sdk(status: int, body: bytes, request: Request) -> ApiError:
    """The SDK's plain-text refusal as the one error shape; which check failed is known
    only by its status, so a status this module does not know keeps the SDK's words."""
    if status == 400:
        content_type = request.headers.get("content-type")
        sent = f"as {content_type[:80]!r}" if content_type else "without a Content-Type"
        return ApiError(
            400,
            f"the body was sent {sent}, not as JSON: send it with Content-Type: application/json",
            code="unsupported_media_type",
        )
    if status == 421:
        host = request.headers.get("host")
        sent = f"Host {host[:200]!r} is" if host else "a request without a Host header is"
        return ApiError(
            421,
            f"{sent} not allowed on this MCP endpoint: add the host to "
            f"MEMSTRATA_MCP_ALLOWED_HOSTS, where 'name:*' allows any port. {_REBINDING}",
            code="host_not_allowed",
        )
    if status == 403:
        origin = request.headers.get("origin") or ""
        return ApiError(
            403,
            f"Origin {origin[:200]!r} is not allowed on this MCP endpoint: add it to "
            f"MEMSTRATA_MCP_ALLOWED_ORIGINS, where 'scheme://name:*' allows any port. "
            f"{_REBINDING}",
            code="origin_not_allowed",
        )
    said = body.decode("utf-8", "replace").strip()[:200] or f"HTTP {status}"
    return ApiError(status, f"the MCP transport refused the request: {said}")

"""Streamable HTTP at ``<api_prefix>/mcp`` inside the FastAPI app, behind bearer tokens.

:func:`mount_mcp` adds one route and runs the SDK's session manager inside the app's own
lifespan (one process, one lifespan; the runtime is opened first and closed last).
:class:`BearerGate` is the auth bridge: the REST API's ``Authenticator`` checks the
``Authorization`` header, and a failure is the REST API's own 401 (same body, same
``WWW-Authenticate``). The token's user becomes the SDK's authenticated principal, so a
session created with one user's token answers 404 to any other user's token, and every
tool, resource and prompt reads the user from the request, never from an argument. An
expired token is refused like any other bad one, with one exception: a ``DELETE`` that ends
a session its user holds (:meth:`BearerGate.ending_own_session`), so a client whose token
ran out can still close its session rather than leave it holding a slot. Each
user may hold ``mcp_max_sessions_per_user`` sessions at once (:mod:`memstrata.mcp.sessions`),
counted as their requests pass (:mod:`memstrata.mcp.counted`).
The SDK's own refusals of bad input come in plain text, pydantic's words, or not at all
(a request whose id it cannot read gets 202 and no answer), so the gate refuses that input
itself, after authentication, in the REST API's error shape with a JSON-RPC error, saying
how to fix it: headers the SDK's transport refuses (:mod:`memstrata.mcp.headers`) and
bodies that are not one JSON-RPC message, or hold a lone surrogate the SDK reports only as
"unexpected end of hex escape" (:mod:`memstrata.mcp.parse_errors`). What the SDK still
refuses itself (an ended session, a missing session id, another method) gets the same
shape too (:mod:`memstrata.mcp.sdk_answers`). A body over MEMSTRATA_MAX_REQUEST_BYTES is
the REST API's 413 too, unless it calls a whole-file tool: that may be as large as the
REST PUT's body (:mod:`memstrata.mcp.body_limit`). Every refusal is logged with its cause and,
the token being valid, its user (:mod:`memstrata.mcp.refusal_log`). A request then holds
its JSON-RPC id in its session, and its event stream is served through a shutdown's grace
(:mod:`memstrata.mcp.inflight`).

A session lives in the process that opened it, so replicas behind a load balancer need
affinity on the ``Mcp-Session-Id`` header, or ``mcp_stateless``: the SDK's stateless mode,
where ``initialize`` opens no session and every request stands alone, so any replica
answers it. Then there are no sessions to count and no ledger (docs/MCP.md, "Replicas
behind a load balancer").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memstrata.api.auth import Authenticator
from memstrata.api.context import ApiContext
from memstrata.api.errors import ApiError, map_exception
from memstrata.api.routing import read_body, refuse_declared_overflow, replaying, too_large
from memstrata.api.token_refusals import AuthenticationError, ExpiredTokenError
from memstrata.config import Settings
from memstrata.logs import log_event
from memstrata.mcp.body_limit import MCP_BODY_FIX, MessageLimits
from memstrata.mcp.counted import serve_counted
from memstrata.mcp.headers import HeaderChecks
from memstrata.mcp.inflight import InFlightStreams
from memstrata.mcp.owners import principal
from memstrata.mcp.parse_errors import bad_body
from memstrata.mcp.refusal_log import log_refusal, logging_refusals
from memstrata.mcp.sdk_answers import in_error_shape
from memstrata.mcp.server import build_server
from memstrata.mcp.sessions import SessionLedger, jsonrpc_error_fields

MCP_PATH = "/mcp"

logger = logging.getLogger(__name__)


class BearerGate:
    """ASGI wrapper: authenticate like ``/api``, then hand the user to the MCP transport,
    within the user's session cap (``sessions``; None in stateless mode: no sessions).
    ``headers``: the SDK's header checks, with the settings its session manager got."""

    def __init__(
        self,
        app: ASGIApp,
        auth: Authenticator,
        limits: MessageLimits,
        sessions: SessionLedger | None,
        headers: HeaderChecks,
    ) -> None:
        self.app = app
        self.auth = auth
        self.limits = limits
        self.sessions = sessions
        self.headers = headers
        self.streams = InFlightStreams()  # memstrata.mcp.inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        authorization = headers.get("authorization")
        user_id: str | None = None  # for the refusal's log line, once the token is valid
        try:
            user_id = self._authenticate(scope, headers, authorization)
            scope.setdefault("state", {})["user_id"] = user_id  # for the request log
            await self.headers.refuse(scope, receive, user_id)
            # The REST API's 413s (JSON, the one error shape), declared and then counted as
            # a chunked body is read, so the SDK's plain-text 413 is never the answer. Up
            # to a whole file's call (memstrata.mcp.body_limit); a body over the request
            # limit is held to it unless it calls a whole-file tool.
            limit = self.limits.file
            refuse_declared_overflow(headers.get("content-length"), limit, MCP_BODY_FIX)
            body = await read_body(Request(scope, receive), limit, MCP_BODY_FIX)
            over = self.limits.over(body)
            if over is not None:
                raise too_large(len(body), over, MCP_BODY_FIX)
            if scope["method"] == "POST":
                _refuse_bad_body(body, user_id)
        except (ApiError, ClientDisconnect) as exc:
            await _refuse(exc, scope, receive, send, user_id)
            return
        receive = replaying(body, receive)
        token = (authorization or "").strip().partition(" ")[2].strip()
        scope["user"] = principal(user_id, token)
        send = logging_refusals(in_error_shape(send), user_id)  # what the SDK still refuses
        # Its id held in its session, its event stream served through a shutdown.
        app = partial(self.streams.serve, self.app, user_id, body)
        if self.sessions is None:
            await app(scope, receive, send)
            return
        await serve_counted(self.sessions, app, user_id, scope, receive, send)

    def _authenticate(self, scope: Scope, headers: Headers, authorization: str | None) -> str:
        """The token's user, from the headers alone (nothing reads the body before this)."""
        try:
            return self.auth.authenticate(authorization)
        except ExpiredTokenError:
            user_id = self.ending_own_session(scope, headers, authorization)
            if user_id is None:
                raise
            return user_id

    def ending_own_session(
        self, scope: Scope, headers: Headers, authorization: str | None
    ) -> str | None:
        """The user of an expired token that asks to end (DELETE) a session this user
        holds; None for any other request, which gets the expiry's 401.

        Without it, a client whose token ran out while it held a session could not close
        it, and the session kept a slot under both caps until the idle timeout. The token
        must be valid but for its age, and have expired at most the idle timeout ago
        (beyond the leeway): a session used with it alone has ended by itself by then (its
        last request came before the expiry), so a longer grace would end nothing more and
        only lengthen what a leaked token can do. Only the session's own user passes, and
        the SDK checks that again (the session's principal)."""
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if self.sessions is None or scope["method"] != "DELETE" or session_id is None:
            return None
        grace_s = self.sessions.idle_timeout_s
        try:
            user_id = self.auth.authenticate(authorization, expired_grace_s=grace_s)
        except AuthenticationError:
            return None
        if not self.sessions.holds(user_id, session_id):
            return None
        log_event(logger, "mcp.session.ended_with_expired_token", user_id=user_id)
        return user_id


def _refuse_bad_body(body: bytes, user_id: str) -> None:
    """400 for a POST body that is not one JSON-RPC message the SDK can answer, saying
    what is wrong and how to fix it (:func:`memstrata.mcp.parse_errors.bad_body`)."""
    bad = bad_body(body)
    if bad is None:
        return
    bad.log(logger, user_id)
    fields = jsonrpc_error_fields(bad.message, code=bad.code, request_id=bad.request_id)
    raise ApiError(400, bad.message, extra=fields)


async def _refuse(
    exc: ApiError | ClientDisconnect, scope: Scope, receive: Receive, send: Send, user: str | None
) -> None:
    """The REST API's error response, which is also a JSON-RPC error; ``user``: the
    token's, when it was valid."""
    mapped = map_exception(exc)
    assert mapped is not None  # both map
    # Header and body refusals have their own lines (mcp.refused, mcp.parse_error); a
    # client gone is no refusal.
    # A bad signature has its own line already (``auth.token.forged``).
    if (isinstance(exc, AuthenticationError) and not exc.logged) or mapped.status_code == 413:
        log_refusal(mapped.status_code, mapped.body.get("code"), mapped.body["detail"], user)
    for key, value in jsonrpc_error_fields(mapped.body["detail"]).items():
        mapped.body.setdefault(key, value)  # a parse error brought its own
    await mapped.response()(scope, receive, send)


def token_user(ctx: ServerRequestContext[Any, Any]) -> str:
    """The user the :class:`BearerGate` authenticated for this request."""
    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    if isinstance(user, AuthenticatedUser) and user.access_token.subject:
        return user.access_token.subject
    raise MCPError(INVALID_REQUEST, "no authenticated user on this request")


def transport_security(settings: Settings) -> TransportSecuritySettings:
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=settings.mcp_dns_rebinding_protection,
        allowed_hosts=list(settings.mcp_allowed_hosts),
        allowed_origins=list(settings.mcp_allowed_origins),
    )


def mount_mcp(app: FastAPI, context: ApiContext) -> StreamableHTTPSessionManager:
    """Serve MCP at ``<api_prefix>/mcp`` in ``app``; mount it before any catch-all route."""
    settings = context.settings
    limits = MessageLimits.of(settings)
    server = build_server(lambda: context.mem, token_user)
    idle_timeout_s = settings.mcp_session_idle_timeout_s
    security = transport_security(settings)
    manager = StreamableHTTPSessionManager(
        app=server,
        stateless=settings.mcp_stateless,
        security_settings=security,
        session_idle_timeout=idle_timeout_s,
        max_request_body_size=limits.file,  # the gate refuses first, in the one error shape
        max_sessions=None,  # the ledger's cap, which makes room instead of refusing all
    )
    # The ledger forgets an idle session after the same timeout the SDK ends it. Stateless,
    # the SDK keeps nothing between requests: nothing to count, nothing to refuse.
    sessions = (
        None
        if settings.mcp_stateless
        else SessionLedger(
            settings.mcp_max_sessions_per_user,
            idle_timeout_s,
            per_server=settings.mcp_max_sessions,
        )
    )
    if sessions is not None:
        ledger = sessions
        context.metrics.watch_count(
            "memstrata_mcp_sessions",
            "MCP sessions open in this process (and session-opening requests in flight); "
            "at MEMSTRATA_MCP_MAX_SESSIONS a new one ends the least recently used idle one.",
            lambda: ledger.total,
        )
    headers = HeaderChecks(security, json_response=manager.json_response)
    gate = BearerGate(manager.handle_request, context.auth, limits, sessions, headers)
    app.router.routes.append(Route(settings.api_prefix + MCP_PATH, endpoint=gate))
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(asgi: Any) -> AsyncIterator[Any]:
        # The runtime first (attached by the app's lifespan), so it outlives every session.
        async with inner(asgi) as state, manager.run():
            yield state

    app.router.lifespan_context = lifespan
    return manager

"""Who owns an MCP session in the SDK's eyes, and ending a session as its owner.

The SDK's session manager ties each session to the principal that opened it (the
``(client_id, issuer, subject)`` of the request's ``AuthenticatedUser``) and answers a
request from any other principal as if the session did not exist. :func:`principal` is
the one place that principal is made from a memstrata user, for the user's own requests
(:class:`memstrata.mcp.http.BearerGate`) and for :func:`end_as_owner`.

The SDK offers no public call to end a session from the server's side (only its idle
timeout and the client's ``DELETE`` end one); :func:`end_as_owner` ends it the client's
way, through the manager's public ASGI entry: a ``DELETE`` with the session's id, as its
owner. The SDK then forgets the session at once, as when its client closes it, and its
next request gets 404 ``Session not found``.
"""

from __future__ import annotations

import logging

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Scope

from memstrata.logs import describe, log_event

logger = logging.getLogger(__name__)

# The headers of the request that made room which the ending DELETE carries too: they
# passed the SDK's Host / Origin checks (DNS-rebinding protection) a moment ago.
_CHECKED_HEADERS = ("host", "origin")


def principal(user_id: str, token: str = "") -> AuthenticatedUser:
    """The SDK's principal for ``user_id``; the SDK compares ``client_id`` and ``subject``
    (the token itself is not compared, so ending a session needs none)."""
    return AuthenticatedUser(
        AccessToken(token=token, client_id=user_id, scopes=[], subject=user_id)
    )


async def end_as_owner(app: ASGIApp, session_id: str, user_id: str, trigger: Scope) -> None:
    """End ``session_id`` (of ``user_id``) with a ``DELETE`` sent to the SDK's ``app``;
    ``trigger`` is the request it is ended for. A failure is logged, not raised: the
    session then ends at its idle timeout, as it would have without this."""
    sent = Headers(scope=trigger)
    headers = [(MCP_SESSION_ID_HEADER.encode(), session_id.encode("latin-1"))]
    headers += [
        (name.encode(), sent[name].encode("latin-1")) for name in _CHECKED_HEADERS if name in sent
    ]
    scope: Scope = {
        **trigger,
        "method": "DELETE",
        "headers": headers,
        "query_string": b"",
        "user": principal(user_id),
        "state": {},
    }
    status: int | None = None
    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> Message:
        return requests.pop() if requests else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    try:
        await app(scope, receive, send)
    except Exception as exc:  # the new session is served all the same
        log_event(
            logger, "mcp.session.end_failed", logging.WARNING, user_id=user_id, cause=describe(exc)
        )
        return
    # 404: the SDK had already let it go (it ended or expired meanwhile).
    if status not in (200, 404):
        log_event(logger, "mcp.session.end_failed", logging.WARNING, user_id=user_id, status=status)

"""The MCP SDK's own HTTP error answers, in the one error shape.

The gate (:mod:`memstrata.mcp.http`) refuses the bad input it can recognise before the SDK
sees it. What is left for the SDK to refuse — a request for a session that has ended, a
request without its session id, a method ``/mcp`` does not serve, a GET that does not
accept an event stream — it answers with a bare JSON-RPC error (``{"jsonrpc", "id",
"error"}``). :func:`in_error_shape` wraps the ``send`` of the SDK's answer so that such a
body also carries the REST API's ``code``, ``detail`` and ``message``, the detail saying
how to go on where the SDK's words do not. Every other answer passes through untouched,
event streams included: only an error status is held until its body is complete.

No refusal names a session (``Mcp-Session-Id``): the SDK's transport adds its own id to
every error it answers, so a request without an id that it refused (a GET, a
``tools/list`` before ``initialize``) carried the id of a session the SDK made for that
request and dropped at once, and a client taking it up got 404 for it. Inside a session
the id is the client's own, which it need not be told again.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import MutableHeaders
from starlette.types import Message, Send

from memstrata.api.error_shape import error_body
from memstrata.mcp.sessions import jsonrpc_error_fields

_ENDED = (
    "the MCP session has ended (idle timeout, a restart, or it lives on another "
    "replica): send initialize again and use the new Mcp-Session-Id"
)

# How to go on, by the SDK's message (its words are stable across its two protocol eras).
_HINTS = {
    "Session not found": _ENDED,
    # The session's own answer in the moment between its idle timeout and the SDK
    # forgetting it.
    "Not Found: Session has been terminated": _ENDED,
    "Bad Request: Missing session ID": (
        "send the Mcp-Session-Id header that initialize answered with, or initialize first"
    ),
    "Method Not Allowed": (
        "/mcp takes POST (JSON-RPC messages), GET (the server's event stream) and DELETE "
        "(end a session)"
    ),
    "Not Acceptable: Client must accept text/event-stream": (
        "a GET opens the server's event stream: send Accept: text/event-stream"
    ),
}

# By status, for the answers the SDK sends without a body.
_EMPTY_HINTS = {
    405: (
        "with MCP-Protocol-Version 2026-07-28 /mcp takes POST only (no event stream, no "
        "session to end): send each JSON-RPC message in a POST"
    ),
}


def in_error_shape(send: Send) -> Send:
    """``send`` for the SDK's answer: an error answer's JSON-RPC body gains ``code``,
    ``detail`` and ``message``, and its headers lose ``Mcp-Session-Id``."""
    held: Message | None = None
    chunks: list[bytes] = []

    async def shaped(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and message["status"] >= 400:
            held = message
            return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        sent = b"".join(chunks)
        empty = not sent.strip()
        body = _empty(held["status"]) if empty else _shaped_body(held["status"], sent)
        start = dict(held)
        headers = MutableHeaders(raw=list(held.get("headers", [])))
        headers["content-length"] = str(len(body))
        del headers[MCP_SESSION_ID_HEADER]  # a refusal names no session (module doc)
        if empty:
            headers["content-type"] = "application/json"
        start["headers"] = headers.raw
        await send(start)
        await send({"type": "http.response.body", "body": body})

    return shaped


def _empty(status: int) -> bytes:
    """The body for an error the SDK answers with none (the 2026-07-28 protocol's 405 for a
    GET or a DELETE)."""
    try:
        said = HTTPStatus(status).phrase
    except ValueError:  # a status the standard library does not name
        said = f"HTTP {status}"
    detail = _with_hint(said, _EMPTY_HINTS.get(status))
    return json.dumps({**error_body(status, detail), **jsonrpc_error_fields(detail)}).encode()


def _shaped_body(status: int, body: bytes) -> bytes:
    """``body`` with the error shape's fields added, when it is a JSON-RPC error without
    them; any other body unchanged."""
    try:
        document: Any = json.loads(body)
    except ValueError:
        return body
    if not isinstance(document, dict) or "detail" in document:
        return body
    error = document.get("error")
    if not isinstance(error, dict) or not isinstance(said := error.get("message"), str):
        return body
    detail = _with_hint(said, _HINTS.get(said))
    # MCP clients show the JSON-RPC message: it says how to go on as well.
    document["error"] = {**error, "message": detail}
    return json.dumps({**error_body(status, detail), **document}).encode()


def _with_hint(said: str, hint: str | None) -> str:
    return f"{said}: {hint}" if hint else said

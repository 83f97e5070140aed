"""One log line for each refused ``/mcp`` request, saying why: ``mcp.request.refused``.

The access line (``http.request``) gives a refusal's status only, and before
authentication had run its course not even the user: a 413 from a valid token logged
``user_id: null``, a 404 for an ended session or a 429 for too many sessions said nothing
of their cause, and a 401 said why only when the signature was forged. This line carries
the status, the error's ``code``, its cause (the answer's own words, which never quote the
token) and the user when the token was valid. A bad signature is the exception: its one
line is the authenticator's ``auth.token.forged`` (or ``auth.token.foreign_key``), a
WARNING naming the user the token claims (``AuthenticationError.logged``).

Refusals the gate writes before the SDK (401, 413, bad headers and bodies) are logged by
:func:`log_refusal`; those written after it (the caps' 429 and 503, a duplicate id's 409,
the SDK's 404 for an ended or another user's session, 400 for a missing session id) by
:func:`logging_refusals`, which reads the body the one error shape gives them
(:mod:`memstrata.mcp.sdk_answers`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.types import Message, Send

from memstrata.api.middleware import request_level
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

# An error body past this is not read for its cause (the one error shape is far smaller).
MAX_READ_BYTES = 16_384


def refusal_level(status: int) -> int:
    """The level of a refusal's log line: the REST API's for an answer of ``status``
    (``api.middleware.request_level``). A 4xx is the client's mistake, its to fix and no
    operator's concern: INFO, as REST's 4xx are; a 5xx, a part of the server failing,
    stays a WARNING."""
    return request_level(status, probe=False)


# A client's bad input (a message, its params or a tool's arguments refused: -32700, -32600,
# -32602), over stdio too: the level of the 400 the HTTP gate answers for a bad body.
INPUT_REFUSED_LEVEL = refusal_level(400)


def log_refusal(status: int, code: str | None, cause: str, user_id: str | None) -> None:
    log_event(
        logger,
        "mcp.request.refused",
        refusal_level(status),
        status=status,
        code=code,
        cause=cause,
        user_id=user_id,
    )


def logging_refusals(send: Send, user_id: str) -> Send:
    """``send`` for an authenticated request's answer: an error status is logged, with the
    ``code`` and ``detail`` of its body, once the body is complete."""
    status: int | None = None
    chunks: list[bytes] = []
    size = 0

    async def watched(message: Message) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start" and message["status"] >= 400:
            status = message["status"]
        elif status is not None and message["type"] == "http.response.body":
            body = message.get("body", b"")
            size += len(body)
            if size <= MAX_READ_BYTES:
                chunks.append(body)
            if not message.get("more_body", False):
                code, cause = _cause(b"".join(chunks) if size <= MAX_READ_BYTES else b"")
                log_refusal(status, code, cause, user_id)
                status = None
        await send(message)

    return watched


def _cause(body: bytes) -> tuple[str | None, str]:
    """The ``code`` and the cause an error body gives (``detail``, else its JSON-RPC
    error's message)."""
    try:
        document: Any = json.loads(body)
    except ValueError:
        return None, "(no readable cause in the answer)"
    if not isinstance(document, dict):
        return None, "(no readable cause in the answer)"
    code = document.get("code")
    cause = document.get("detail")
    error = document.get("error")
    if not isinstance(cause, str) and isinstance(error, dict):
        cause = error.get("message")
    return (
        code if isinstance(code, str) else None,
        cause if isinstance(cause, str) else "(no readable cause in the answer)",
    )

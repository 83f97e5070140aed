"""Reading the SDK's answer to a session-opening request as it is sent: where it ends, and
whether it is a JSON-RPC error.

The SDK answers an ``initialize`` it cannot accept (bad params: -32602) inside a 200, in
an event stream (or a JSON body in its JSON-response mode), with a new ``Mcp-Session-Id``
all the same, and keeps that session until it idles out. :class:`AnswerReader` reads such
an answer chunk by chunk so the gate (:mod:`memstrata.mcp.counted`) can tell at its last
chunk that no session was opened for the client to use.

Only the first :data:`INSPECTED_BYTES` are kept: the SDK's error answer to an
``initialize`` is about a hundred bytes, and an answer longer than that is read as a
success (the session counts, as it did before it was read at all), so a large answer is
never buffered whole.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.datastructures import Headers
from starlette.types import Message

INSPECTED_BYTES = 64 * 1024

_SSE_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the event-stream grammar's three, only


def is_last_chunk(message: Message) -> bool:
    """Whether ``message`` ends its response: the client then holds the whole answer."""
    return message["type"] == "http.response.body" and not message.get("more_body", False)


class AnswerReader:
    """The first :data:`INSPECTED_BYTES` of one answer, and the JSON-RPC error in them."""

    def __init__(self, start: Message) -> None:
        content_type = Headers(raw=start.get("headers", [])).get("content-type", "")
        self._media_type = content_type.partition(";")[0].strip().lower()
        self._chunks: list[bytes] = []
        self._size = 0

    def feed(self, message: Message) -> None:
        chunk: bytes = message.get("body", b"")
        self._size += len(chunk)
        if self._size <= INSPECTED_BYTES:
            self._chunks.append(chunk)
        else:
            self._chunks.clear()  # too long for an error answer: read no further

    def error(self) -> dict[str, Any] | None:
        """The ``error`` member of the JSON-RPC error the answer holds; None for a success,
        an answer too long to be read, or one in a media type that carries no JSON-RPC."""
        if self._size > INSPECTED_BYTES:
            return None
        return jsonrpc_error_in(self._media_type, b"".join(self._chunks))


def jsonrpc_error_in(media_type: str, body: bytes) -> dict[str, Any] | None:
    """The ``error`` member of the first JSON-RPC error in ``body`` (``application/json``:
    one message; ``text/event-stream``: one message per event); None when there is none."""
    text = body.decode("utf-8", errors="replace")
    if media_type == "application/json":
        documents = [text]
    elif media_type == "text/event-stream":
        documents = event_data(text)
    else:
        return None
    for document in documents:
        error = _error_of(document)
        if error is not None:
            return error
    return None


def event_data(text: str) -> list[str]:
    """The data of each event in an event stream (its ``data:`` lines joined by newlines);
    a last event the stream ended without a blank line after is read too."""
    found: list[str] = []
    data: list[str] = []
    for line in _SSE_LINE_BREAK.split(text):
        if not line:
            if data:
                found.append("\n".join(data))
            data = []
        elif line.startswith("data:"):
            value = line.removeprefix("data:")
            data.append(value.removeprefix(" "))
    if data:
        found.append("\n".join(data))
    return found


def _error_of(document: str) -> dict[str, Any] | None:
    try:
        message: Any = json.loads(document)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "method" in message:
        return None
    error = message.get("error")
    return error if isinstance(error, dict) else None

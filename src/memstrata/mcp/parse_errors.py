"""Answers for what the SDK cannot parse: a stdio line or an HTTP body that is not JSON,
or not a JSON-RPC message.

The SDK parses with pydantic (jiter), which refuses a string holding a lone surrogate
(``"\\ud800"`` — JSON's grammar allows it, UTF-8 cannot carry it) with "unexpected end of
hex escape". The standard library's parser reads it, so :func:`lone_surrogate` can say
where it is and how to fix it, with the REST API's rule (:func:`memstrata.text.
lone_surrogate_problem`: "… is not valid Unicode: it contains a lone surrogate …"),
and answer the request's own id, so the client's call fails at once instead of waiting.
For any other line the id cannot be trusted, so the answer's id is null (JSON-RPC 2.0).

Over HTTP, :func:`bad_body` answers what the SDK's transport would answer with pydantic's
raw text (a batch, a ``jsonrpc`` other than "2.0", no JSON-RPC message at all) or not at
all: a request whose ``id`` is not a string or an integer matches no request but still
passes as a notification (which ignores unknown keys), so the handshake-era transport
acknowledges it with 202 and the client waits forever for an answer.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

import pydantic_core
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import TypeAdapter, ValidationError

from memstrata.logs import describe, log_event
from memstrata.mcp.refusal_log import INPUT_REFUSED_LEVEL
from memstrata.text import lone_surrogate_at, lone_surrogate_problem

# A JSON escape of a UTF-16 surrogate (\uD800–\uDFFF): only then can a lone one be there.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

_FIX_SURROGATE = (
    "send a complete UTF-16 surrogate pair (such as \\ud83d\\ude00) or the character itself"
)

_FIX_BODY = "send one JSON-RPC 2.0 request, notification or response as a JSON object"

# The SDK's own rule for a request id (a string, or an integer that is not a bool or a
# float), so the gate refuses exactly the ids the SDK cannot answer.
_REQUEST_ID: TypeAdapter[RequestId] = TypeAdapter(RequestId)


@dataclass(frozen=True)
class BadMessage:
    """The JSON-RPC error that answers one unparseable message."""

    code: int
    message: str
    request_id: RequestId | None = None

    def error(self) -> JSONRPCError:
        return JSONRPCError(
            jsonrpc="2.0",
            id=self.request_id,
            error=ErrorData(code=self.code, message=self.message),
        )

    def session_message(self) -> SessionMessage:
        return SessionMessage(self.error())

    def log(self, logger: logging.Logger, user_id: str) -> None:
        """The ``mcp.parse_error`` line, over stdio and HTTP alike: INFO, the client's
        mistake (``refusal_log.INPUT_REFUSED_LEVEL``)."""
        log_event(
            logger,
            "mcp.parse_error",
            INPUT_REFUSED_LEVEL,
            user_id=user_id,
            error=self.message,
            code=self.code,
            request_id=self.request_id,
        )


def lone_surrogate(raw: str | bytes) -> BadMessage | None:
    """The answer for JSON text whose only fault is a string with a lone surrogate, else
    None (not JSON at all, or no lone surrogate: the SDK's own parse decides)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if _SURROGATE_ESCAPE.search(raw) is None:
        return None
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    found = _find_lone_surrogate(document)
    if found is None:
        return None
    where, text = found
    message = f"{lone_surrogate_problem(text, where)}; {_FIX_SURROGATE}"
    return BadMessage(PARSE_ERROR, message, _request_id(document))


def bad_body(body: bytes) -> BadMessage | None:
    """The answer for an HTTP POST body the SDK would refuse with a parser's or pydantic's
    own words, or accept and never answer (module doc); None for one it can serve."""
    if (surrogate := lone_surrogate(body)) is not None:
        return surrogate
    try:
        document = pydantic_core.from_json(body)  # the parser the SDK's transport uses
    except ValueError as exc:
        return BadMessage(PARSE_ERROR, f"body is not valid JSON: {exc}; {_FIX_BODY}")
    if isinstance(document, list):
        return BadMessage(
            INVALID_REQUEST,
            "body is a JSON array (a JSON-RPC batch), which MCP does not accept: "
            "send each message in a POST of its own",
        )
    if not isinstance(document, dict):
        return BadMessage(
            INVALID_REQUEST, f"body is {_kind(document)}, not a JSON object: {_FIX_BODY}"
        )
    if (unusable := _unusable_id(document)) is not None:
        return unusable
    try:
        jsonrpc_message_adapter.validate_python(document, by_name=False)
    except ValidationError as exc:
        return BadMessage(
            INVALID_REQUEST,
            f"body is not a JSON-RPC 2.0 request, notification or response: "
            f"{_summary(exc.errors())}; {_FIX_BODY}",
        )
    return None


def unusable_id(line: str) -> BadMessage | None:
    """The answer for a line holding a request whose ``id`` is not a string or an integer
    (module doc: the SDK would take it for a notification and never answer), else None;
    every other line is left to the SDK's parse."""
    if '"id"' not in line:
        return None  # a notification: no id to check, and no parse ahead of the SDK's
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return _unusable_id(document) if isinstance(document, dict) else None


def _unusable_id(document: dict[str, Any]) -> BadMessage | None:
    if "method" not in document or "id" not in document:
        return None
    method = document["method"]
    if isinstance(method, str) and method.startswith("notifications/"):
        return None  # a notification with a stray id: served as the notification it is
    if _is_request_id(document["id"]):
        return None
    return BadMessage(
        INVALID_REQUEST,
        f"id must be a string or an integer, not {_kind(document['id'])}: give each "
        'request an id such as 1 or "req-1" (a message without an id is a '
        "notification, which gets no answer)",
    )


def _is_request_id(value: Any) -> TypeGuard[RequestId]:
    """The SDK's rule for a request id (``_REQUEST_ID``)."""
    try:
        _REQUEST_ID.validate_python(value)
    except ValidationError:
        return False
    return True


def bad_line(exc: Exception) -> BadMessage | None:
    """The answer for what the SDK's stdio reader yielded instead of a message for one
    line (``exc``); None for a blank line, which is no message at all."""
    if not isinstance(exc, ValidationError):
        return BadMessage(PARSE_ERROR, f"line could not be read: {describe(exc)}")
    errors = exc.errors()
    invalid_json = next((e for e in errors if e["type"] == "json_invalid"), None)
    if invalid_json is None:
        return BadMessage(
            INVALID_REQUEST,
            f"line is not a JSON-RPC 2.0 request, notification or response: {_summary(errors)}",
        )
    reason = str(invalid_json["msg"]).removeprefix("Invalid JSON: ")
    line = invalid_json.get("input")
    if isinstance(line, str):
        line = line.rstrip("\r\n")  # the reader's line ends with its newline
        if not line.strip():
            return None
        if (surrogate := lone_surrogate(line)) is not None:
            return surrogate
        try:  # again without the newline, so the position is where the line stops
            pydantic_core.from_json(line)
        except ValueError as exc:
            reason = str(exc)
    return BadMessage(
        PARSE_ERROR,
        f"line is not valid JSON: {reason}; send each JSON-RPC message as one line of JSON",
    )


def _find_lone_surrogate(document: Any) -> tuple[str, str] | None:
    """Where the first string (key or value) with a lone surrogate is: a path such as
    ``params.arguments.content``, and the string."""
    stack: list[tuple[str, Any]] = [("the message", document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if lone_surrogate_at(value) is not None:
                return where, value
        elif isinstance(value, dict):
            prefix = "" if where == "the message" else f"{where}."
            for key in value:
                if lone_surrogate_at(key) is not None:
                    return f"a key in {where}", key
            stack.extend((prefix + key, item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


def _request_id(document: Any) -> RequestId | None:
    """The id of a request (an object with a method) the answer can carry, else None: a
    response's id would match one of the client's own requests."""
    if not isinstance(document, dict) or "method" not in document:
        return None
    request_id = document.get("id")
    if not _is_request_id(request_id):
        return None
    if isinstance(request_id, str) and lone_surrogate_at(request_id) is not None:
        return None  # could not be written back
    return request_id


def _summary(errors: list[Any]) -> str:
    """pydantic's errors for the closest of the four message shapes (the one with the
    fewest errors), one ``field: message`` each."""
    shapes: dict[str, list[str]] = {}
    for error in errors:
        loc = tuple(str(part) for part in error["loc"])
        shape, field = (loc[0], ".".join(loc[1:])) if loc else ("", "")
        shapes.setdefault(shape, []).append(f"{field}: {error['msg']}" if field else error["msg"])
    closest = min(shapes.values(), key=len, default=[])
    return "; ".join(closest) or "unrecognised message"


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: the value itself when short."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):  # the JSON had a fraction or exponent (1.0, 1e400)
        return "a number with a fraction or an exponent"
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer"}
    return names.get(type(value), type(value).__name__)

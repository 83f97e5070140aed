"""What the MCP gate refuses in a POST body: pure functions, exact messages; everything the
SDK can answer passes untouched."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest

from memstrata.mcp.parse_errors import BadMessage, bad_body

FIX = "send one JSON-RPC 2.0 request, notification or response as a JSON object"
ID_FIX = (
    'give each request an id such as 1 or "req-1" (a message without an id is a '
    "notification, which gets no answer)"
)


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": "req-1", "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": -7, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2**80, "method": "ping"},  # the SDK answers any integer
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 4, "result": {}},  # the client's answer to a server request
        {"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "no"}},
    ],
)
def test_what_the_sdk_can_answer_passes(message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    mcp_types.jsonrpc_message_adapter.validate_json(body, by_name=False)  # the SDK's view
    assert bad_body(body) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            b'{"jsonrpc": "2.0", "id": {"n": 1}, "method": "ping"}',
            BadMessage(-32600, f"id must be a string or an integer, not an object: {ID_FIX}"),
        ),
        (
            b'{"jsonrpc": "2.0", "id": false, "method": "ping"}',
            BadMessage(-32600, f"id must be a string or an integer, not false: {ID_FIX}"),
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1.0, "method": "ping"}',
            BadMessage(
                -32600,
                "id must be a string or an integer, not a number with a fraction or an "
                f"exponent: {ID_FIX}",
            ),
        ),
        (
            b'[{"jsonrpc": "2.0", "method": "notifications/initialized"}]',
            BadMessage(
                -32600,
                "body is a JSON array (a JSON-RPC batch), which MCP does not accept: send "
                "each message in a POST of its own",
            ),
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}',
            BadMessage(
                -32600,
                "body is not a JSON-RPC 2.0 request, notification or response: params: "
                f"Input should be a valid dictionary; {FIX}",
            ),
        ),
        (b'"ping"', BadMessage(-32600, f"body is a string, not a JSON object: {FIX}")),
        (
            b"",
            BadMessage(
                -32700,
                f"body is not valid JSON: EOF while parsing a value at line 1 column 0; {FIX}",
            ),
        ),
        (  # a lone surrogate keeps its own answer, with the request's id
            rb'{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"q": "\udc00"}}',
            BadMessage(
                -32700,
                "params.q is not valid Unicode: it contains a lone surrogate ('\\udc00' at "
                "character 1); send a complete UTF-16 surrogate pair (such as "
                "\\ud83d\\ude00) or the character itself",
                3,
            ),
        ),
    ],
)
def test_what_the_sdk_would_refuse_or_drop_is_told_what_is_wrong(
    raw: bytes, expected: BadMessage
) -> None:
    assert bad_body(raw) == expected

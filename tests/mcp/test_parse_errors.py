"""The answers for messages the SDK cannot parse: pure functions, exact messages."""

from __future__ import annotations

import json

import mcp_types
import pytest
from pydantic import ValidationError

from memstrata.mcp.parse_errors import BadMessage, bad_line, lone_surrogate, unusable_id

FIX = "send a complete UTF-16 surrogate pair (such as \\ud83d\\ude00) or the character itself"


def sdk_exception(line: str) -> Exception:
    """What the SDK's stdio reader yields for ``line`` (it keeps the newline)."""
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(line + "\n", by_name=False)
    except ValidationError as exc:
        return exc
    raise AssertionError(f"the SDK parses {line!r}")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            r'{"jsonrpc":"2.0","id":"a","method":"m","params":{"turns":[{},{"text":"ab\udfff"}]}}',
            BadMessage(
                -32700,
                "params.turns[1].text is not valid Unicode: it contains a lone surrogate "
                f"('\\udfff' at character 3); {FIX}",
                "a",
            ),
        ),
        (
            r'{"jsonrpc":"2.0","id":1,"method":"m","params":{"k\ud800":1}}',
            BadMessage(
                -32700,
                "a key in params is not valid Unicode: it contains a lone surrogate "
                f"('\\ud800' at character 2); {FIX}",
                1,
            ),
        ),
        (  # a response's id is the client's own: never answered with it
            r'{"jsonrpc":"2.0","id":1,"result":{"t":"\ud800"}}',
            BadMessage(
                -32700,
                "result.t is not valid Unicode: it contains a lone surrogate "
                f"('\\ud800' at character 1); {FIX}",
            ),
        ),
        (  # an id that cannot be written back
            r'{"jsonrpc":"2.0","id":"\ud800","method":"m"}',
            BadMessage(
                -32700,
                "id is not valid Unicode: it contains a lone surrogate "
                f"('\\ud800' at character 1); {FIX}",
            ),
        ),
        (
            r'"\udc00\ud800"',
            BadMessage(
                -32700,
                "the message is not valid Unicode: it contains a lone surrogate "
                f"('\\udc00' at character 1); {FIX}",
            ),
        ),
    ],
)
def test_a_lone_surrogate_is_located(raw: str, expected: BadMessage) -> None:
    assert lone_surrogate(raw) == expected
    assert lone_surrogate(raw.encode()) == expected
    json.dumps(expected.error().model_dump(), ensure_ascii=False).encode()  # can be sent


@pytest.mark.parametrize(
    "raw",
    [
        r'{"t":"\ud83d\ude00"}',  # a pair is one character
        r'{"t":"\\ud800"}',  # a backslash, then text
        r'{"t":"\ud800"',  # not JSON at all: the SDK's message stands
        b'{"t":"\xff\\ud800"}',  # not UTF-8
    ],
)
def test_anything_else_is_left_to_the_sdk(raw: str | bytes) -> None:
    assert lone_surrogate(raw) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '{"jsonrpc":"2.0","id":3,"method":"x"',
            BadMessage(
                -32700,
                "line is not valid JSON: EOF while parsing an object at line 1 column 36; "
                "send each JSON-RPC message as one line of JSON",
            ),
        ),
        (
            r'{"jsonrpc":"2.0","id":2,"method":"x","params":{"a":"\ud800"}}',
            BadMessage(
                -32700,
                "params.a is not valid Unicode: it contains a lone surrogate "
                f"('\\ud800' at character 1); {FIX}",
                2,
            ),
        ),
        (
            '{"foo":1}',
            BadMessage(
                -32600,
                "line is not a JSON-RPC 2.0 request, notification or response: "
                "jsonrpc: Field required; method: Field required",
            ),
        ),
        (
            "[1]",
            BadMessage(
                -32600,
                "line is not a JSON-RPC 2.0 request, notification or response: "
                "Input should be an object",
            ),
        ),
        (" \t", None),  # a blank line is no message: nothing to answer
    ],
)
def test_bad_line(line: str, expected: BadMessage | None) -> None:
    assert bad_line(sdk_exception(line)) == expected


def test_another_exception_is_a_parse_error() -> None:
    assert bad_line(OSError("boom")) == BadMessage(-32700, "line could not be read: OSError: boom")


@pytest.mark.parametrize(
    ("line", "unusable"),
    [
        ('{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}\n', True),
        ('{"jsonrpc":"2.0","id":true,"method":"ping"}', True),
        ('{"jsonrpc":"2.0","id":null,"method":"ping"}', True),
        ('{"jsonrpc":"2.0","id":7,"method":"ping"}', False),
        ('{"jsonrpc":"2.0","id":"r-1","method":"ping"}', False),
        ('{"jsonrpc":"2.0","method":"notifications/initialized"}', False),  # no id: fine
        # a notification with a stray id: the SDK serves it as a notification, as before
        ('{"jsonrpc":"2.0","id":null,"method":"notifications/initialized"}', False),
        ('{"jsonrpc":"2.0","id":1.5,"result":{}}', False),  # a response: the SDK's to judge
        ('{"jsonrpc":"2.0","id":{', False),  # not JSON: bad_line answers it
    ],
)
def test_unusable_id(line: str, unusable: bool) -> None:
    answer = unusable_id(line)
    assert (answer is not None) == unusable
    if answer is not None:
        assert (answer.code, answer.request_id) == (-32600, None)
        assert answer.message.startswith("id must be a string or an integer, not ")

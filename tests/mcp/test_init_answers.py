"""Reading an ``initialize`` answer as it is sent: the JSON-RPC error in a JSON body or an
event stream, in any chunking, and nothing read past :data:`INSPECTED_BYTES`."""

from __future__ import annotations

import json

import pytest
from starlette.types import Message

from memstrata.mcp.init_answers import INSPECTED_BYTES, AnswerReader, event_data, is_last_chunk

ERROR = {"code": -32602, "message": "Invalid request parameters", "data": ""}
FAILED = json.dumps({"jsonrpc": "2.0", "id": 1, "error": ERROR}).encode()
SUCCEEDED = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "x"}}).encode()


def _start(content_type: str) -> Message:
    headers = [(b"content-type", content_type.encode())]
    return {"type": "http.response.start", "status": 200, "headers": headers}


def _read(content_type: str, body: bytes, chunk: int) -> AnswerReader:
    reader = AnswerReader(_start(content_type))
    for at in range(0, len(body), chunk):
        reader.feed({"type": "http.response.body", "body": body[at : at + chunk]})
    return reader


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_an_error_event_is_found_in_any_chunking(chunk: int, newline: str) -> None:
    stream = newline.join(["event: message", f"data: {FAILED.decode()}", "", ""])
    reader = _read("text/event-stream", stream.encode(), chunk)
    assert reader.error() == ERROR
    success = newline.join(["event: message", f"data: {SUCCEEDED.decode()}", "", ""])
    assert _read("text/event-stream", success.encode(), chunk).error() is None


def test_a_json_answer_and_other_media_types() -> None:
    assert _read("application/json; charset=utf-8", FAILED, 5).error() == ERROR
    assert _read("application/json", SUCCEEDED, 5).error() is None
    assert _read("text/plain", FAILED, 5).error() is None  # carries no JSON-RPC
    assert _read("application/json", b"{not json", 5).error() is None
    request = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "x", "error": ERROR}).encode()
    assert _read("application/json", request, 5).error() is None  # a request, not an answer


def test_an_answer_longer_than_the_inspected_bytes_is_not_read() -> None:
    padding = b": " + b"x" * INSPECTED_BYTES + b"\n\n"  # an event-stream comment
    reader = _read("text/event-stream", padding + b"data: " + FAILED + b"\n\n", 4096)
    assert reader.error() is None


def test_event_data_joins_data_lines_and_keeps_an_unterminated_last_event() -> None:
    text = "id: 1\ndata: a\ndata:b\n\n: comment\n\ndata: last"
    assert event_data(text) == ["a\nb", "last"]


def test_the_last_chunk_ends_the_answer() -> None:
    assert is_last_chunk({"type": "http.response.body", "body": b""})
    assert not is_last_chunk({"type": "http.response.body", "body": b"", "more_body": True})
    assert not is_last_chunk({"type": "http.response.start", "status": 200})

"""stdin's lines as ``memstrata mcp`` reads them, from a real pipe written in pieces: the
same lines and refusals wherever the pieces split them."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from memstrata.mcp.body_limit import MessageLimits
from memstrata.mcp.parse_errors import BadMessage
from memstrata.mcp.stdio_lines import leading_id, read_lines

pytestmark = pytest.mark.anyio

LIMIT = 100
ONE_LIMIT = MessageLimits(LIMIT, LIMIT)


def _request(request_id: object, text: str) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "ping", "params": {"t": text}}
    return json.dumps(message).encode()


async def _read_all(
    data: bytes, piece: int, limits: MessageLimits = ONE_LIMIT
) -> list[str | BadMessage]:
    """What :func:`read_lines` yields for ``data`` written into a pipe ``piece`` bytes at
    a time, each write given time to be read on its own."""
    read_fd, write_fd = os.pipe()

    def write() -> None:
        for start in range(0, len(data), piece):
            os.write(write_fd, data[start : start + piece])
            time.sleep(0.002)
        os.close(write_fd)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        return [line async for line in read_lines(read_fd, limits)]
    finally:
        writer.join()
        os.close(read_fd)


async def test_lines_and_refusals_do_not_depend_on_how_the_pipe_splits_them() -> None:
    at_limit = _request(1, "a" * (LIMIT - len(_request(1, ""))))
    over = _request(2, "b" * 5000)
    bad = _request(3, "caf").replace(b"caf", b"caf\xe9!")
    tail = _request("x", "no newline at the end")
    data = at_limit + b"\n" + over + b"\n\n" + bad + b"\r\n" + tail
    expected: list[object] = [
        at_limit.decode() + "\n",
        ("too long", 2, len(over)),
        "\n",
        ("not utf-8", 3, bad.index(b"\xe9")),
        tail.decode() + "\n",
    ]
    for piece in (1, 7, 64, 4096, len(data)):
        got = await _read_all(data, piece)
        assert [_summary(line) for line in got] == expected, piece


def _summary(line: str | BadMessage, limit: int = LIMIT) -> object:
    if isinstance(line, str):
        return line
    if line.message.startswith("line is not valid UTF-8"):
        offset = int(line.message.split("at byte offset ")[1].split()[0])
        return ("not utf-8", line.request_id, offset)
    assert line.code == -32600, line
    size = int(line.message.removeprefix("line is ").split()[0])
    assert f"over the limit of {limit} bytes" in line.message, line.message
    return ("too long", line.request_id, size)


def _call(request_id: int, tool: str, text: str) -> bytes:
    params = {"name": tool, "arguments": {"content": text}}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


async def test_a_whole_file_call_may_be_as_long_as_the_file_limit_allows() -> None:
    """memory_write up to the larger limit; any other line, and any past it, refused."""
    limits = MessageLimits(request=LIMIT, file=4 * LIMIT)
    file_call = _call(1, "memory_write", "w" * (2 * LIMIT))
    other = _call(2, "record_memory", "r" * (2 * LIMIT))
    past = _call(3, "memory_write", "p" * (5 * LIMIT))
    data = file_call + b"\n" + other + b"\n" + past + b"\n"
    for piece in (1, 64, len(data)):
        got = await _read_all(data, piece, limits)
        assert got[0] == file_call.decode() + "\n", piece
        assert _summary(got[1]) == ("too long", 2, len(other))
        assert _summary(got[2], limits.file) == ("too long", 3, len(past))
        assert len(got) == 3


@pytest.mark.parametrize(
    ("text", "request_id"),
    [
        ('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"q":"cut', 7),
        ('  { "id" : "req-1" , "method": "ping"', "req-1"),
        ('{"method":"ping","params":{"id":5},"id":6}', 6),
        ('{"jsonrpc":"2.0","id":7,"params":{"q":"cut', None),  # method not seen yet
        ('{"jsonrpc":"2.0","id":7,"result":{}}', None),  # a response: not ours to answer
        ('{"id":true,"method":"ping"}', None),
        ('{"id":1.5,"method":"ping"}', None),
        ('{"id":"a\ufffdb","method":"ping"}', None),  # a bad byte inside the id
        ("[1, 2]", None),
        ("", None),
    ],
)
def test_the_id_of_a_refused_line_comes_from_its_leading_members(
    text: str, request_id: object
) -> None:
    assert leading_id(text) == request_id

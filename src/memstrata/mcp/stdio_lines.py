"""stdin's lines for ``memstrata mcp``, read as bytes so that two kinds of line never
reach the SDK's parser:

- A line over its limit, the one ``/mcp`` enforces on an HTTP body
  (:mod:`memstrata.mcp.body_limit`: MEMSTRATA_MAX_REQUEST_BYTES, a whole-file tool's call
  as much as the REST PUT's body). Past the larger its bytes are counted and dropped as
  they arrive, so memory holds at most one read chunk and the line's first bytes, whatever
  its size. Answered ``-32600`` with the line's size and the limit.
- A line that is not UTF-8: the SDK's reader decoded with ``errors="replace"``, so a stray
  Latin-1 byte was stored as U+FFFD and the write answered as a success. Answered
  ``-32700`` with the first bad byte and its offset in the line; nothing of it is served.

Both answers carry the request's id when the line's first members show it (a request
with a ``method``), so the client's call fails at once instead of waiting; otherwise the
id is null, as JSON-RPC says for a message that could not be read.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
from mcp_types import INVALID_REQUEST, PARSE_ERROR, RequestId

from memstrata.logs import describe
from memstrata.mcp.body_limit import MCP_BODY_FIX, MessageLimits
from memstrata.mcp.parse_errors import BadMessage

logger = logging.getLogger(__name__)

# Requests read from stdin and not yet answered, at most: past it stdin is not read until
# an answer is written, so a client that stops reading stdout stalls on its own writes
# instead of the server holding every request it sends (and their answers) in memory.
MAX_IN_FLIGHT = 32

_CHUNK = 64 * 1024
# What is kept of a line over the limit to find its id: the first members of a message
# ("jsonrpc", "id", "method") fit in far less.
_HEAD_BYTES = 4096

_FIX_UTF8 = "send each JSON-RPC message as one line of UTF-8 JSON"

# How Python's UTF-8 decoder names a fault, said of the byte it stopped at.
_UTF8_FAULTS = {
    "invalid start byte": "cannot start a character",
    "invalid continuation byte": "starts a character that the bytes after it do not continue",
    "unexpected end of data": "starts a character that the line ends before completing",
}


async def read_lines(fd: int, limits: MessageLimits) -> AsyncIterator[str | BadMessage]:
    """Each line of ``fd`` up to EOF: its text with the newline, or the answer that
    refuses it (module doc). ``limits``: the largest lines in bytes, newline excluded."""
    limit = limits.file  # no line is kept past it
    pending = bytearray()
    dropped = 0  # bytes of a line over the limit seen so far; 0 while none
    head = b""
    while chunk := await _read(fd):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:end]
            start = end + 1
            if dropped:
                yield too_long(head, dropped + len(piece), limit)
                dropped, head = 0, b""
                continue
            pending += piece
            line = bytes(pending)
            pending.clear()
            yield checked(line, limits)
        rest = chunk[start:]
        if dropped:
            dropped += len(rest)
        elif len(pending) + len(rest) > limit:
            head = bytes((pending + rest)[:_HEAD_BYTES])
            dropped = len(pending) + len(rest)
            pending.clear()
        else:
            pending += rest
    if dropped:
        yield too_long(head, dropped, limit)
    elif pending:
        yield checked(bytes(pending), limits)


async def _read(fd: int) -> bytes:
    """The next bytes of ``fd``; b"" at EOF or on a read error (logged). Abandoned if
    cancelled: the thread may stay blocked until the client writes or closes stdin."""
    try:
        return await anyio.to_thread.run_sync(os.read, fd, _CHUNK, abandon_on_cancel=True)
    except OSError as exc:
        logger.warning("stdin could not be read, taken as closed: %s", describe(exc))
        return b""


def checked(line: bytes, limits: MessageLimits) -> str | BadMessage:
    """``line``'s text with a newline, or the answer that refuses it."""
    over = limits.over(line)
    if over is not None:
        return too_long(line[:_HEAD_BYTES], len(line), over)
    try:
        return line.decode("utf-8") + "\n"
    except UnicodeDecodeError as exc:
        return not_utf8(line, exc)


def too_long(head: bytes, size: int, limit: int) -> BadMessage:
    """The answer for a line of ``size`` bytes over ``limit`` that begins with ``head``."""
    message = (
        f"line is {size} bytes, over the limit of {limit} bytes ({MCP_BODY_FIX}; an "
        "operator can raise MEMSTRATA_MAX_REQUEST_BYTES)"
    )
    return BadMessage(INVALID_REQUEST, message, leading_id(head.decode("utf-8", "replace")))


def not_utf8(line: bytes, exc: UnicodeDecodeError) -> BadMessage:
    """The answer for ``line``, which ``exc`` says is not UTF-8."""
    fault = _UTF8_FAULTS.get(exc.reason, f"cannot be decoded ({exc.reason})")
    message = (
        f"line is not valid UTF-8: byte 0x{line[exc.start]:02x} at byte offset {exc.start} "
        f"(counting from 0) {fault}; {_FIX_UTF8}"
    )
    return BadMessage(PARSE_ERROR, message, leading_id(line.decode("utf-8", "replace")))


def leading_id(text: str) -> RequestId | None:
    """The id of the request that ``text`` (a message, maybe cut short or with bad bytes
    replaced) begins, read from its top-level members up to the first that does not
    parse; None unless they hold a ``method`` and an id the SDK accepts, unaltered."""
    decoder = json.JSONDecoder()
    members: dict[str, Any] = {}
    at = _skip_space(text, 0)
    if not text.startswith("{", at):
        return None
    at += 1
    while True:
        try:
            key, at = decoder.raw_decode(text, _skip_space(text, at))
            at = _skip_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                break
            value, at = decoder.raw_decode(text, _skip_space(text, at + 1))
        except (ValueError, RecursionError):
            break
        members[key] = value
        at = _skip_space(text, at)
        if not text.startswith(",", at):
            break
        at += 1
    request_id = members.get("id")
    if "method" not in members or isinstance(request_id, bool):
        return None
    if isinstance(request_id, int) or (isinstance(request_id, str) and "\ufffd" not in request_id):
        return request_id
    return None


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at

"""What ``memstrata mcp`` does with stdin it must not take as it comes: bytes that are not
UTF-8, a line over the request limit, and a client that sends without reading answers.

stdin was decoded with errors="replace" (a bad byte was stored as U+FFFD, answered
"Recorded"), read a line whole whatever its size (60 MB: RSS +177 MB), and read on while
no answer could be written (31,855 requests held in 90 s, RSS +572 MB).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from memstrata.config import FILE_BODY_ROOM, JSON_ESCAPE_BYTES
from memstrata.db.database import Database
from memstrata.mcp.body_limit import MCP_BODY_FIX
from memstrata.mcp.stdio_lines import MAX_IN_FLIGHT
from tests.mcp.stdio_driver import (
    call,
    peak_rss_kib,
    read_answers,
    rss_kib,
    started,
    stop,
    stored_memory,
)

pytestmark = pytest.mark.timeout(180)


def _settings(pg_url: str, **more: str) -> dict[str, str]:
    return {
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_LOG_LEVEL": "INFO",
        **more,
    }


BAD_UTF8 = (
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"record_memory",'
    b'"arguments":{"content":"latin1 caf\xe9 and \xff\xfe bytes"}}}\n'
)


def test_bad_utf8_is_refused_with_its_byte_offset_and_nothing_stored(
    tmp_path: Path, pg_url: str, db: Database
) -> None:
    process, log = started(tmp_path, "utf8-ann", **_settings(pg_url))
    assert process.stdin is not None
    try:
        process.stdin.write(BAD_UTF8 + call(8, "record_memory", {"content": "plain tea"}))
        process.stdin.flush()
        answers = read_answers(process, until_id=8, timeout_s=60)
    finally:
        stop(process)
    assert [a.get("id") for a in answers] == [7, 8], answers or log.read_text(errors="replace")
    offset = BAD_UTF8.index(b"\xe9")
    assert answers[0]["error"] == {
        "code": -32700,
        "message": f"line is not valid UTF-8: byte 0xe9 at byte offset {offset} (counting "
        "from 0) starts a character that the bytes after it do not continue; send each "
        "JSON-RPC message as one line of UTF-8 JSON",
    }
    assert "error" not in answers[1], answers[1]
    stored = stored_memory(db, "utf8-ann")
    assert "plain tea" in stored and "latin1" not in stored, stored
    warned = [line for line in log.read_text().splitlines() if "mcp.parse_error" in line]
    assert len(warned) == 1 and "utf8-ann" in warned[0], warned


LIMIT = 64 * 1024
HUGE_MB = 48


def test_a_line_over_the_request_limit_is_refused_without_reading_it_whole(
    tmp_path: Path, pg_url: str
) -> None:
    # A file must fit in a request (the settings refuse a larger file limit).
    settings = _settings(
        pg_url, MEMSTRATA_MAX_REQUEST_BYTES=str(LIMIT), MEMSTRATA_MAX_CONTENT_BYTES=str(LIMIT // 2)
    )
    process, log = started(tmp_path, "huge-ann", **settings)
    assert process.stdin is not None
    huge = call(9, "memory_search", {"query": "q" * (HUGE_MB * 1024 * 1024)})
    just_over = call(10, "memory_search", {"query": "q" * LIMIT})
    at_limit = call(11, "memory_search", {"query": "q" * (LIMIT - 200)})
    try:
        before = peak_rss_kib(process.pid)
        process.stdin.write(huge + just_over + at_limit)
        process.stdin.flush()
        answers = read_answers(process, until_id=11, timeout_s=120)
        grown = peak_rss_kib(process.pid) - before
    finally:
        stop(process)
    assert [a.get("id") for a in answers] == [9, 10, 11], answers or log.read_text()
    # Past a whole file's call (memstrata.mcp.body_limit), no line is read to see its tool.
    file_call = JSON_ESCAPE_BYTES * (LIMIT // 2) + FILE_BODY_ROOM
    for answer, line, limit in zip(answers[:2], (huge, just_over), (file_call, LIMIT), strict=True):
        assert answer["error"] == {
            "code": -32600,
            "message": f"line is {len(line) - 1} bytes, over the limit of {limit} bytes "
            f"({MCP_BODY_FIX}; an operator can raise MEMSTRATA_MAX_REQUEST_BYTES)",
        }
    assert "error" not in answers[2], answers[2]
    # Read whole, the 48 MB line took at least its own size (and more as text).
    assert grown < HUGE_MB * 1024 // 4, f"peak RSS grew {grown} KiB"


def test_a_client_that_never_reads_gets_backpressure(tmp_path: Path, pg_url: str) -> None:
    """Requests sent without reading stdout: once the answers fill the pipe and
    MAX_IN_FLIGHT wait unwritten, the server stops reading stdin, so the client's writes
    block instead of the server holding every request. All are answered once it reads."""
    process, log = started(tmp_path, "noread-ann", **_settings(pg_url))
    assert process.stdin is not None
    os.set_blocking(process.stdin.fileno(), False)
    line = call(3, "memory_read", {"name": "agents"})
    sent, last_accepted = 0, time.monotonic()
    started_at = time.monotonic()
    try:
        rss_before = rss_kib(process.pid)
        while time.monotonic() - started_at < 20 and time.monotonic() - last_accepted < 4:
            try:
                written = os.write(process.stdin.fileno(), line)
            except BlockingIOError:
                time.sleep(0.05)
                continue
            assert written == len(line)  # a pipe write of < PIPE_BUF bytes is whole
            sent, last_accepted = sent + 1, time.monotonic()
        stalled = time.monotonic() - last_accepted
        rss_after = rss_kib(process.pid)
        os.set_blocking(process.stdin.fileno(), True)
        answers = read_answers(process, until_id=None, timeout_s=1)
        while len(answers) < sent:
            more = read_answers(process, until_id=None, timeout_s=2)
            if not more:
                break
            answers += more
    finally:
        stop(process)
    assert stalled >= 4, f"stdin still read after {sent} requests: no backpressure"
    # Those held: in the stdout pipe, in flight, in the stdin pipe and the reader's chunk.
    assert sent < MAX_IN_FLIGHT + 3000, sent
    assert len(answers) == sent, (len(answers), sent, log.read_text()[-2000:])
    assert rss_after - rss_before < 40 * 1024, (rss_before, rss_after)

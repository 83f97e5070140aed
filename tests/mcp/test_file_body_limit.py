"""A memory file at its limit saves through MCP however its JSON escapes it, over HTTP and
stdio alike, as it does through the REST PUT: a call of a whole-file tool may be as large
as the PUT's body (``file_request_bytes``), the content is measured decoded against the
file limit, and every other message keeps MEMSTRATA_MAX_REQUEST_BYTES.

A file of control characters is the worst case: JSON escapes each as ``\\u00XX``, six
bytes for one. With the file limit at the request limit, such a file's call was six times
over the request limit and refused as too large, though the file itself fits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from memstrata.api.middleware import request_level
from memstrata.api.routers.limits import Limits
from memstrata.config import FILE_BODY_ROOM, JSON_ESCAPE_BYTES
from memstrata.mcp.body_limit import MCP_BODY_FIX, WHOLE_FILE_TOOLS, carries_file
from memstrata.mcp.tools import TOOLS
from memstrata.serve_process import running_serve
from tests.log_lines import events_in
from tests.mcp.messages import MCP_HEADERS
from tests.mcp.served import bearer, serve_env
from tests.mcp.stdio_driver import call, read_answers, started, stop

pytestmark = pytest.mark.timeout(180)

# The file limit, and the request limit no larger: a file at the limit has a call over it.
TIGHT = 32 * 1024
# The body limit of a whole file's call at these settings (``file_request_bytes``).
FILE_BODY = JSON_ESCAPE_BYTES * TIGHT + FILE_BODY_ROOM
AT_LIMIT = "\x01" * TIGHT
OVER_LIMIT = "\x01" * (TIGHT + 1)
OPERATOR = "an operator can raise MEMSTRATA_MAX_REQUEST_BYTES"
FILE_LIMIT = (
    f"content is {TIGHT + 1} bytes, over the limit of {TIGHT} bytes (shorten the file; an "
    "operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
)
TIGHT_SETTINGS = {
    "MEMSTRATA_MAX_CONTENT_BYTES": str(TIGHT),
    "MEMSTRATA_MAX_REQUEST_BYTES": str(TIGHT),
    "MEMSTRATA_EMBEDDING_AUTOSTART": "false",  # BM25 only: nothing here searches
    "MEMSTRATA_LOG_JSON": "true",
}


def write(content: str, version: int) -> dict[str, Any]:
    return {"name": "memory", "content": content, "expected_version": version, "replace_all": True}


def tool_call(tool: str, arguments: dict[str, Any]) -> bytes:
    """A ``tools/call`` message as the line (newline dropped) or body that carries it."""
    return call(5, tool, arguments).rstrip(b"\n")


def test_a_whole_file_call_at_the_limit_is_six_times_the_request_limit() -> None:
    """What the tests below rely on: JSON escapes each control character in six bytes."""
    body = tool_call("memory_write", write(AT_LIMIT, 1))
    assert JSON_ESCAPE_BYTES * TIGHT < len(body) <= FILE_BODY


def test_the_whole_file_tools_are_those_whose_content_may_be_a_file() -> None:
    """The tools whose ``content`` the listing bounds by the file limit, no others."""
    bounded = {
        tool.name
        for tool in TOOLS
        if "bytes of UTF-8"
        in tool.input_schema["properties"].get("content", {}).get("description", "")
    }
    assert bounded == WHOLE_FILE_TOOLS
    advertised = Limits.model_fields["max_file_request_bytes"].description or ""
    assert all(name in advertised for name in WHOLE_FILE_TOOLS), advertised
    assert carries_file(tool_call("update_user", {"section": "Work", "content": "x"}))
    assert not carries_file(tool_call("record_memory", {"content": "x"}))
    assert not carries_file(json.dumps({"method": "tools/call", "params": []}).encode())
    assert not carries_file(b"[1, 2]")
    assert not carries_file(b'{"method": "tools/call", "params": {"name": "memory_write"')


# -- over HTTP -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tight_url(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[str]:
    data = tmp_path_factory.mktemp("mcp-file-body")
    env = serve_env(data, pg_url, **TIGHT_SETTINGS)
    with (data / "stderr.log").open("w") as stderr, running_serve(env, stderr=stderr) as url:
        yield url


@asynccontextmanager
async def mcp_client(url: str, user: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=bearer(user), timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def said(result: CallToolResult) -> str:
    first = result.content[0]
    assert first.type == "text"
    return first.text


def version_of(result: CallToolResult) -> int:
    assert not result.is_error, said(result)
    assert result.structured_content is not None
    version = result.structured_content["version"]
    assert isinstance(version, int)
    return version


@pytest.mark.anyio
async def test_http_saves_a_file_of_control_characters_at_the_limit(tight_url: str) -> None:
    async with mcp_client(tight_url, "http-ctl") as client:
        version = version_of(await client.call_tool("memory_read", {"name": "memory"}))
        saved = await client.call_tool("memory_write", write(AT_LIMIT, version))
        over = await client.call_tool("memory_write", write(OVER_LIMIT, version_of(saved)))
        read = await client.call_tool("memory_read", {"name": "memory"})
    assert version_of(saved) == version + 1
    # One byte over is the file limit's refusal, not the body limit's.
    assert over.is_error and said(over) == f"error: {FILE_LIMIT}"
    assert read.structured_content is not None
    assert read.structured_content["content"] == AT_LIMIT
    assert read.structured_content["version"] == version + 1


def post(url: str, user: str, body: bytes) -> httpx.Response:
    headers = {**bearer(user), **MCP_HEADERS, "Content-Type": "application/json"}
    return httpx.post(f"{url}/mcp", content=body, headers=headers, timeout=60)


def test_http_refuses_a_body_over_the_file_calls_limit(tight_url: str) -> None:
    past = tool_call("memory_write", write("x" * FILE_BODY, 1))
    answer = post(tight_url, "http-past", past)
    assert answer.status_code == 413
    assert answer.json()["detail"] == (
        f"request body is {len(past)} bytes, over the limit of {FILE_BODY} bytes "
        f"({MCP_BODY_FIX}; {OPERATOR})"
    )


def test_http_keeps_the_request_limit_for_any_other_call(tight_url: str) -> None:
    """A search as large as a file's call is still the request limit's 413."""
    search = tool_call("memory_search", {"query": "q" * (2 * TIGHT)})
    assert TIGHT < len(search) <= FILE_BODY
    answer = post(tight_url, "http-search", search)
    assert answer.status_code == 413
    assert answer.json()["detail"] == (
        f"request body is {len(search)} bytes, over the limit of {TIGHT} bytes "
        f"({MCP_BODY_FIX}; {OPERATOR})"
    )


# -- over stdio ----------------------------------------------------------------------------


def _tight_stdio(tmp_path: Path, pg_url: str, user: str) -> Any:
    return started(tmp_path, user, MEMSTRATA_DATABASE_URL=pg_url, **TIGHT_SETTINGS)


def _result(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def test_stdio_saves_a_file_of_control_characters_at_the_limit(tmp_path: Path, pg_url: str) -> None:
    process, log = _tight_stdio(tmp_path, pg_url, "stdio-ctl")
    assert process.stdin is not None
    try:
        process.stdin.write(call(2, "memory_read", {"name": "memory"}))
        process.stdin.flush()
        (read,) = read_answers(process, until_id=2, timeout_s=60)
        version = _result(read)["structuredContent"]["version"]
        # One at a time: the SDK runs calls concurrently and answers each when done.
        past = call(4, "memory_write", write("x" * FILE_BODY, version + 1))
        search = call(5, "memory_search", {"query": "q" * (2 * TIGHT)})
        answers = []
        for request_id, lines in [
            (3, call(3, "memory_write", write(AT_LIMIT, version))),
            (6, past + search + call(6, "memory_write", write(OVER_LIMIT, version + 1))),
            (7, call(7, "memory_read", {"name": "memory"})),
        ]:
            process.stdin.write(lines)
            process.stdin.flush()
            answers += read_answers(process, until_id=request_id, timeout_s=90)
    finally:
        stop(process)
    assert [a.get("id") for a in answers] == [3, 4, 5, 6, 7], answers or log.read_text()
    saved, too_long, other, refused, stored = answers
    assert _result(saved)["structuredContent"]["version"] == version + 1
    assert _result(refused)["isError"] is True
    assert _result(refused)["content"][0]["text"] == f"error: {FILE_LIMIT}"
    for answer, line, limit in ((too_long, past, FILE_BODY), (other, search, TIGHT)):
        assert answer["error"] == {
            "code": -32600,
            "message": f"line is {len(line) - 1} bytes, over the limit of {limit} bytes "
            f"({MCP_BODY_FIX}; {OPERATOR})",
        }
    assert _result(stored)["structuredContent"]["content"] == AT_LIMIT


def test_stdio_logs_a_clients_bad_line_at_the_level_of_rests_4xx(
    tmp_path: Path, pg_url: str
) -> None:
    """The REST API logs a request it answers 4xx at INFO (``request_level``): a client's
    mistake is no operator's warning. So does stdio, for a line it cannot parse and one
    over the limit."""
    process, log = _tight_stdio(tmp_path, pg_url, "stdio-level")
    assert process.stdin is not None
    try:
        process.stdin.write(b"{not json\n")
        process.stdin.write(call(8, "memory_search", {"query": "q" * (2 * TIGHT)}))
        process.stdin.write(call(9, "memory_read", {"name": "memory"}))
        process.stdin.flush()
        answers = read_answers(process, until_id=9, timeout_s=60)
    finally:
        stop(process)
    assert [a.get("id") for a in answers] == [None, 8, 9], answers or log.read_text()
    logged = events_in(log, "mcp.parse_error")
    rest_4xx = logging.getLevelName(request_level(400, probe=False)).lower()
    assert [(e["level"], e["user_id"], e["code"]) for e in logged] == [
        (rest_4xx, "stdio-level", -32700),
        (rest_4xx, "stdio-level", -32600),
    ]

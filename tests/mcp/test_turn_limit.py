"""The turn size limit over MCP, and what the tool schemas state of the limits.

``conversation_index_turn`` refuses a turn over the limit with the library's words, over
the in-process client, the stdio server (its line limit raised above the 3 MB turn, which
was once stored as 2,744 chunks) and HTTP (a turn under the 1 MiB body limit). The listing
states the limits, and every file name the server accepts passes a validating client's
check of its schema.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Tool

from memstrata.memory.kinds import MAX_CONTENT_BYTES, USER_FILE_KINDS, FileKind, model_kind
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.served import bearer, served, stdio_env

pytestmark = pytest.mark.anyio

TOOL = "conversation_index_turn"
RULE = (
    f"over the limit of {MAX_TURN_BYTES} bytes (UTF-8) for one turn's user_message and "
    "assistant_reply; split the text over several turns, each part with the next turn_index"
)
OVER = "word " * (MAX_TURN_BYTES // 5) + "over!"  # 262,145 bytes: under the 1 MiB body limit


def said(result: CallToolResult) -> str:
    first = result.content[0]
    assert first.type == "text"
    return first.text


def listed(tools: list[Tool], name: str) -> Tool:
    return next(t for t in tools if t.name == name)


async def test_a_turn_over_the_limit_is_refused_with_the_librarys_words(
    connect: ClientFactory, mem: Memstrata
) -> None:
    turn = {"session_id": "s", "turn_index": 0, "user_message": OVER}
    async with connect() as client:
        result = await client.call_tool(TOOL, turn)
    assert result.is_error
    assert said(result) == f"error: user_message is {len(OVER)} bytes, {RULE}"
    assert mem.search.search("alice", "word", top_k=3).hits == []


async def test_the_listing_states_the_turn_limit_and_a_strict_client_keeps_to_it(
    connect: ClientFactory,
) -> None:
    async with connect() as client:
        tool = listed((await client.list_tools()).tools, TOOL)
    properties = tool.input_schema["properties"]
    assert (
        "user_message and assistant_reply together: at most "
        f"{MAX_TURN_BYTES} bytes of UTF-8; split a longer text over several turns"
    ) in (tool.description or "")
    for name in ("user_message", "assistant_reply"):
        # maxLength counts characters: a bound the byte limit implies, never tighter
        assert properties[name]["maxLength"] == MAX_TURN_BYTES
    check = Draft202012Validator(tool.input_schema)
    turn = {"session_id": "s", "turn_index": 0}
    assert check.is_valid({**turn, "user_message": "x" * MAX_TURN_BYTES})
    assert not check.is_valid({**turn, "user_message": "x" * (MAX_TURN_BYTES + 1)})


def accepted_names(*, agents: bool) -> list[str]:
    """Every spelling of each file's name the tools take (``model_kind``'s rule)."""
    kinds = [*USER_FILE_KINDS, *([FileKind.AGENTS] if agents else [])]
    names = []
    for kind in kinds:
        for name in (kind.api_name, kind.filename, kind.file_type):
            names += [name, name.upper(), name.lower(), name.title(), f"/{name}"]
    return names


async def test_every_file_name_the_server_takes_passes_the_published_schema(
    connect: ClientFactory,
) -> None:
    """The schema listed soul/user/memory(/agents) as an enum: a validating client refused
    MEMORY.md and Memory, which the server takes."""
    async with connect() as client:
        tools = (await client.list_tools()).tools
        for tool_name, agents, call in [
            ("memory_read", True, {}),
            ("memory_write", False, {"content": "# x\n", "expected_version": 0}),
        ]:
            check = Draft202012Validator(listed(tools, tool_name).input_schema)
            for name in accepted_names(agents=agents):
                assert model_kind(name) is not None, name
                assert check.is_valid({**call, "name": name}), (tool_name, name)
        read = await client.call_tool("memory_read", {"name": "/Memory.MD"})
    assert not read.is_error and said(read).startswith("MEMORY.md, version")


async def test_the_file_tools_state_the_file_limit(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = (await client.list_tools()).tools
    limit = f"{MAX_CONTENT_BYTES} bytes of UTF-8"
    content = listed(tools, "memory_write").input_schema["properties"]["content"]
    assert limit in content["description"] and "maxLength" not in content  # configurable
    for name in ("update_long_term_memory", "update_user"):
        assert limit in listed(tools, name).input_schema["properties"]["content"]["description"]


# -- the real transports ----------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_stdio_refuses_a_3_mb_turn_at_once(
    tmp_path: Path, db: object, pg_url: str, embedding_server: LocalEmbeddingServer
) -> None:
    """Before stdio had a line limit the 3 MB turn was chunked and embedded (15 s, every
    embedding timed out, 3,750 rows left to the background worker); with the line limit
    raised above it, the turn limit still refuses it at once."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from memstrata.cli import main; main()", "mcp", "--user", "stdio-big"],
        env=stdio_env(
            tmp_path / "data",
            pg_url,
            embedding_server,
            MEMSTRATA_MAX_REQUEST_BYTES=str(8 * 1024 * 1024),
        ),
    )
    huge = "a long pasted log line\n" * (3_000_000 // 23)
    async with Client(params) as client:
        started = time.perf_counter()
        result = await client.call_tool(
            TOOL, {"session_id": "s", "turn_index": 0, "user_message": huge}
        )
        took = time.perf_counter() - started
        assert result.is_error
        assert said(result) == f"error: user_message is {len(huge)} bytes, {RULE}"
        found = await client.call_tool("memory_search", {"query": "pasted log"})
    assert found.structured_content is not None and found.structured_content["hits"] == []
    assert took < 10, took  # refused before any chunking or embedding


@pytest.fixture(scope="module")
def base_url(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, embedding_server: LocalEmbeddingServer
) -> Iterator[str]:
    with served(tmp_path_factory, "mcp-turn-limit", pg_url, embedding_server) as url:
        yield url


@pytest.mark.timeout(120)
async def test_http_refuses_it_as_a_tool_error_with_rests_words(base_url: str) -> None:
    """Under the body limit, the turn reaches the tool: a tool error a model can act on,
    not a transport error, in the REST 422's words."""
    user = "http-turn-limit"
    headers: dict[str, Any] = bearer(user)
    turn = {"turn_index": 0, "user_message": OVER}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport) as client:
            result = await client.call_tool(TOOL, {"session_id": "s", **turn})
    rest = httpx.post(
        f"{base_url}/api/memory/conversations/s/turns", headers=headers, json=turn, timeout=60
    )
    assert result.is_error
    assert rest.status_code == 422 and said(result) == f"error: {rest.json()['detail']}"
    assert rest.json()["detail"] == f"user_message is {len(OVER)} bytes, {RULE}"
    search = httpx.post(
        f"{base_url}/api/memory/search", headers=headers, json={"query": "word"}, timeout=60
    )
    assert search.status_code == 200 and search.json()["hits"] == []

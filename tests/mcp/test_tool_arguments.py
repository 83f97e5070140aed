"""The MCP tools' arguments: the limits the schemas state, refusals that say how to fix the
call, and the agent tools' guards over MCP (a left-out argument never wipes memory)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult

from memstrata.agent.arguments import MAX_ENTRY_CHARS, MAX_NAME_CHARS, MAX_VALUE_CHARS
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.limits import MAX_QUERY_CHARS
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory

pytestmark = pytest.mark.anyio


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert first.type == "text"
    return first.text


async def refused(client: Client, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error, text(result)
    return text(result)


async def test_the_schemas_state_the_argument_limits(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = {t.name: t.input_schema["properties"] for t in (await client.list_tools()).tools}
    assert tools["record_memory"]["content"]["maxLength"] == MAX_ENTRY_CHARS
    assert tools["record_memory"]["replaces"]["maxLength"] == MAX_ENTRY_CHARS
    for name in ("record_memory", "update_long_term_memory", "update_user"):
        assert tools[name]["section"]["maxLength"] == MAX_NAME_CHARS
    assert tools["update_user"]["key"]["maxLength"] == MAX_NAME_CHARS
    assert tools["update_user"]["key"]["pattern"] == "^[^:]*$"
    assert f"at most {MAX_VALUE_CHARS} characters" in tools["update_user"]["content"]["description"]
    assert tools["memory_search"]["query"]["maxLength"] == MAX_QUERY_CHARS
    assert tools["update_long_term_memory"]["whole_file"]["type"] == "boolean"
    assert tools["update_user"]["replace_section"]["type"] == "boolean"


async def test_refusals_say_how_to_fix_the_call(connect: ClientFactory) -> None:
    async with connect() as client:
        missing = await refused(client, "memory_write", {"name": "user", "content": "x"})
        too_large = await refused(
            client,
            "memory_write",
            {"name": "user", "content": "x" * (256 * 1024 + 1), "expected_version": 1},
        )
        when = await refused(
            client,
            "conversation_index_turn",
            {"session_id": "s1", "turn_index": 0, "user_message": "hi", "timestamp": "yesterday"},
        )
    assert missing == (
        "error: missing required argument(s): expected_version; call memory_read first and "
        "pass the version it returns as expected_version (0 for a file that does not exist yet)"
    )
    assert too_large.endswith(
        "over the limit of 262144 bytes (shorten the file; an operator can raise "
        "MEMSTRATA_MAX_CONTENT_BYTES)"
    )
    assert when == (
        "error: timestamp: Input should be an ISO 8601 date-time string, e.g. "
        "2026-01-01T12:00:00Z, or leave it out"
    )


@pytest.mark.parametrize(
    ("timestamp", "kind"),
    [
        (1767261600, "a number"),
        (1767261600.5, "a number"),
        ("1767261600", "a number in a string"),
        ("-5", "a number in a string"),
        (True, "a boolean"),
        ([], "an array"),
    ],
)
async def test_a_timestamp_that_is_no_string_is_refused(
    connect: ClientFactory, mem: Memstrata, timestamp: object, kind: str
) -> None:
    """The schema says an ISO 8601 string; a number was read as seconds since 1970 (pydantic's
    lax mode) and the turn stored under that date. The message is REST's own (one rule)."""
    turn = {"session_id": "s1", "turn_index": 0, "user_message": "zebra", "timestamp": timestamp}
    async with connect() as client:
        message = await refused(client, "conversation_index_turn", turn)
        schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    assert message == (
        f"error: timestamp: Input should be an ISO 8601 date-time string, not {kind}"
    )
    assert mem.search.search("alice", "zebra", top_k=5).hits == []
    stated = schema["conversation_index_turn"]["properties"]["timestamp"]["anyOf"]
    assert {"type": "string", "format": "date-time"} in stated


async def test_a_left_out_section_never_wipes_memory_md(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        await client.call_tool("record_memory", {"content": "Likes tea", "section": "Decisions"})
        before = mem.store.get_memory_file("alice", FileKind.MEMORY)
        message = await refused(client, "update_long_term_memory", {"content": "- only this"})
        assert mem.store.get_memory_file("alice", FileKind.MEMORY) == before
        result = await client.call_tool(
            "update_long_term_memory", {"content": "- only this", "whole_file": True}
        )
    assert message.startswith(
        "error: without section, this would replace the whole of MEMORY.md, which has 1 "
        "entry in 3 sections (Decisions, Ongoing, Lessons); nothing was written."
    )
    assert not result.is_error
    after = mem.store.get_memory_file("alice", FileKind.MEMORY)
    assert after is not None and after.content == "- only this\n"

"""The MCP file, turn and skill tools refuse bad arguments in the agent tools' words
("unknown argument(s) topk; memory_search takes query, top_k, sources", "missing required
argument(s): query"), not REST's pydantic text ("invalid request: foo: Extra inputs are
not permitted"), through the SDK's own client."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory

pytestmark = pytest.mark.anyio


async def refused(client: Client, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error
    first = result.content[0]
    assert first.type == "text"
    return first.text


CASES = [
    (
        "memory_read",
        {"name": "user", "foo": 1},
        "unknown argument(s) foo; memory_read takes name, section, start_line, line_count",
    ),
    (
        "memory_read",
        {"name": "user", "foo": 1, "Bar baz": 2},
        'unknown argument(s) foo, "Bar baz"; memory_read takes name, section, start_line, '
        "line_count",
    ),
    ("memory_read", {}, "missing required argument(s): name"),
    ("memory_read", {"name": 3}, "name must be a JSON string; got 3"),
    (
        "memory_write",
        {"name": "user"},
        "missing required argument(s): content, expected_version; call memory_read first and "
        "pass the version it returns as expected_version (0 for a file that does not exist yet)",
    ),
    (
        "memory_write",
        {"name": "user", "content": "x", "expected_version": 0, "replace_all": "yes"},
        'replace_all must be true or false (a JSON boolean); got "yes"',
    ),
    (
        "skills_list",
        {"verbose": True},
        "unknown argument(s) verbose; skills_list takes no arguments",
    ),
    (
        "skill_set",
        {"skill_name": "", "enabled": True},
        "skill_name is empty; pass a name from skills_list",
    ),
    (
        "skill_set",
        {"skill_name": "web_search", "enabled": "no"},
        'enabled must be true or false (a JSON boolean); got "no"',
    ),
    ("skill_set", {"skill_name": "web_search"}, "missing required argument(s): enabled"),
    (
        "conversation_index_turn",
        {"turn_index": 0, "user_message": "hi"},
        "missing required argument(s): session_id",
    ),
    (
        "conversation_index_turn",
        {"session_id": "s1", "turn_index": -1, "user_message": "hi"},
        "turn_index must be a JSON integer from 0 to 2147483647; got -1",
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "message"), CASES)
async def test_bad_arguments_are_said_in_the_agent_tools_words(
    connect: ClientFactory, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with connect() as client:
        assert await refused(client, tool, arguments) == f"error: {message}"


async def test_a_write_of_agents_md_is_told_it_is_read_only_first(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """The missing expected_version was said first, and a model that added it was refused
    again, for the file."""
    async with connect() as client:
        said = await refused(client, "memory_write", {"name": "agents", "content": "x"})
    assert said.startswith("error: AGENTS.md is the platform template and is read-only; ")
    assert "expected_version" not in said


async def test_a_bad_timestamp_is_told_its_format_once(connect: ClientFactory) -> None:
    turn = {"session_id": "s1", "turn_index": 0, "user_message": "hi", "timestamp": "noon"}
    async with connect() as client:
        said = await refused(client, "conversation_index_turn", turn)
    # The parser's "(input is too short)" told a model nothing the example does not.
    assert said == (
        "error: timestamp: Input should be an ISO 8601 date-time string, e.g. "
        "2026-01-01T12:00:00Z, or leave it out"
    )
    assert said.count("ISO 8601") == 1 and "2026-12-05" not in said

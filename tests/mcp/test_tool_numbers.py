"""Integer arguments as a model sends them: JSON Schema counts ``5.0`` as an integer, so
``top_k``, ``expected_version`` and ``turn_index`` take it; ``5.5``, ``true`` and the
string ``"5"`` are refused with the value sent (and, for ``"5"``, what to send). Through
the SDK's in-process client on the real runtime."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, stored, text

pytestmark = pytest.mark.anyio


async def test_integral_floats_are_integers(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as client:
        await ok(client, "record_memory", {"content": "Plays the cello on Sundays"})
        found = await ok(client, "memory_search", {"query": "cello", "top_k": 5.0})
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        content = str(read["content"]) + "- 2026-01-05: Tunes it weekly\n"
        written = await ok(
            client,
            "memory_write",
            {"name": "memory", "content": content, "expected_version": float(read["version"])},
        )
        turn = {"session_id": "s", "turn_index": 0.0, "user_message": "hello"}
        indexed = await ok(client, "conversation_index_turn", turn)
    assert found.structured_content is not None and found.structured_content["hits"]
    assert text(written) == f"Saved MEMORY.md as version {read['version'] + 1}."
    assert stored(mem, "alice", FileKind.MEMORY) == (content, read["version"] + 1)
    assert indexed.structured_content is not None


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("memory_search", {"query": "tea", "top_k": 5.5}, "top_k must be a JSON integer; got 5.5"),
        (
            "memory_search",
            {"query": "tea", "top_k": True},
            "top_k must be a JSON integer; got true",
        ),
        (
            "memory_search",
            {"query": "tea", "top_k": "5"},
            'top_k must be a JSON integer: send 5, not "5"',
        ),
        (
            "memory_search",
            {"query": "tea", "top_k": "five"},
            'top_k must be a JSON integer; got "five"',
        ),
        (
            "memory_write",
            {"name": "memory", "content": "x", "expected_version": "2"},
            'expected_version must be a JSON integer: send 2, not "2"',
        ),
        (
            "memory_write",
            {"name": "memory", "content": "x", "expected_version": 1.5},
            "expected_version must be a JSON integer; got 1.5",
        ),
        (
            "conversation_index_turn",
            {"session_id": "s", "turn_index": [0]},
            "turn_index must be a JSON integer; got [0]",
        ),
    ],
)
async def test_other_values_are_refused_with_the_value_sent(
    connect: ClientFactory, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with connect("alice") as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and text(result) == f"error: {message}"

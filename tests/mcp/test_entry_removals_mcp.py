"""Over MCP, through the SDK's client on the real runtime: ``update_long_term_memory``
with ``section`` refuses to drop a section's entries unless ``replace_section`` and lists
what a replacement removed; ``record_memory`` with ``replaces`` and empty content removes
that entry; and of two clients writing one file from the same version at once, the loser
is told the version that won."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused, stored, text

pytestmark = pytest.mark.anyio

ONGOING = ["Migrating billing", "每周四下午和王老师开会"]


async def _recorded(client: Client) -> str:
    for entry in ONGOING:
        await ok(client, "record_memory", {"content": entry, "section": "Ongoing"})
    return datetime.now(UTC).date().isoformat()


async def test_a_section_replacement_keeps_entries_unless_told(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        today = await _recorded(client)
        before = stored(mem, "alice", FileKind.MEMORY)
        emptied = await refused(
            client, "update_long_term_memory", {"section": "Ongoing", "content": ""}
        )
        assert stored(mem, "alice", FileKind.MEMORY) == before
        replaced = await ok(
            client,
            "update_long_term_memory",
            {"section": "Ongoing", "content": "- summary", "replace_section": True},
        )
    quoted = ", ".join(f"'{today}: {entry}'" for entry in ONGOING)
    assert f"would remove 2 of its 2 entries ({quoted})" in emptied
    assert "pass replace_section=true to remove them; nothing was written" in emptied
    assert before is not None
    assert text(replaced) == (
        f"Replaced ## Ongoing in MEMORY.md (version {before[1] + 1}). Removed 2 entries ({quoted})."
    )


async def test_record_memory_with_replaces_and_no_content_removes_the_entry(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        today = await _recorded(client)
        removed = await ok(
            client, "record_memory", {"content": "", "replaces": "每周四下午和王老师开会"}
        )
        again = await refused(
            client, "record_memory", {"content": "", "replaces": "每周四下午和王老师开会"}
        )
    content, version = stored(mem, "alice", FileKind.MEMORY) or ("", 0)
    assert text(removed) == (
        f"Removed the entry '{today}: 每周四下午和王老师开会' from MEMORY.md under ## Ongoing "
        f"(version {version})."
    )
    assert "王老师" not in content and f"- {today}: Migrating billing" in content
    assert again.startswith("error: replaces matches no entry of MEMORY.md")


async def _write(
    connect: ClientFactory, base: int, slot: int, results: list[CallToolResult | None]
) -> None:
    async with connect("alice") as client:
        arguments = {
            "name": "soul",
            "content": f"# SOUL.md\nwriter {slot} on {base}\n",
            "expected_version": base,
            "replace_all": True,
        }
        results[slot] = await client.call_tool("memory_write", arguments)


async def test_the_loser_of_two_clients_racing_is_told_the_version_that_won(
    connect: ClientFactory, mem: Memstrata
) -> None:
    for _ in range(5):
        async with connect("alice") as reader:
            read = await ok(reader, "memory_read", {"name": "soul"})
        base = (read.structured_content or {})["version"]
        results: list[CallToolResult | None] = [None, None]
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_write, connect, base, 0, results)
            tasks.start_soon(_write, connect, base, 1, results)
        [lost] = [r for r in results if r is not None and r.is_error]
        assert lost.structured_content == {
            "error": "version_conflict",
            "expected_version": base,
            "current_version": base + 1,
        }
        assert (stored(mem, "alice", FileKind.SOUL) or ("", 0))[1] == base + 1

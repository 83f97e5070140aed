"""MCP ``update_long_term_memory`` with ``whole_file`` replaces MEMORY.md as ``memory_write``
does, and says what it removed by the same rule and in the same words
(``agent.removals``). ``whole_file`` is the model saying it means to replace the file, as
``memory_write``'s ``replace_all`` is: a rewrite that removes most of the file is
written, and its answer lists what went."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, stored, text

pytestmark = pytest.mark.anyio

ENTRIES = ["Chose PostgreSQL", "Uses vim", "Lives in Porto"]


async def test_whole_file_says_what_it_removed_in_memory_writes_words(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        for entry in ENTRIES:
            await ok(client, "record_memory", {"content": entry, "section": "Decisions"})
        old, version = stored(mem, "alice", FileKind.MEMORY)
        new = "\n".join(line for line in old.split("\n") if "Lives in Porto" not in line)
        rewritten = await ok(
            client, "update_long_term_memory", {"content": new, "whole_file": True}
        )
        # The same removal, by memory_write: the same words after its own first sentence.
        await ok(client, "update_long_term_memory", {"content": old, "whole_file": True})
        written = await ok(
            client,
            "memory_write",
            {"name": "memory", "content": new, "expected_version": version + 2},
        )
    today = datetime.now(UTC).date().isoformat()
    removed = f"Removed 1 entry ('{today}: Lives in Porto')."
    assert text(rewritten) == f"Replaced the whole of MEMORY.md (version {version + 1}). {removed}"
    assert text(written) == f"Saved MEMORY.md as version {version + 3}. {removed}"


async def test_whole_file_removing_most_of_the_file_is_written_and_lists_it(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        for entry in ENTRIES:
            await ok(client, "record_memory", {"content": entry, "section": "Decisions"})
        _, version = stored(mem, "alice", FileKind.MEMORY)
        result = await ok(
            client, "update_long_term_memory", {"content": "- only this", "whole_file": True}
        )
    today = datetime.now(UTC).date().isoformat()
    listed = ", ".join(f"'{today}: {entry}'" for entry in ENTRIES)
    assert text(result) == (
        f"Replaced the whole of MEMORY.md (version {version + 1}). Removed 3 entries "
        f"({listed}) and 3 sections (Decisions, Ongoing, Lessons)."
    )
    assert stored(mem, "alice", FileKind.MEMORY) == ("- only this\n", version + 1)

"""MCP ``memory_write`` racing another writer of the same text, through the SDK's client.

The tool reads the stored file, judges the write against it, then writes. When another
writer (a person's PUT, a retry of this very call) stores the same text in between, the
write lands on a file that holds it already: the answer is "No change" at the version that
writer made, and no version is added (``memory.store.holds_text``). The real runtime
(PostgreSQL, directory sandboxes); the other writer runs between the tool's read and its
write, from a wrapper around that read.
"""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, stored, text

pytestmark = pytest.mark.anyio


async def test_a_write_whose_text_landed_meanwhile_is_no_change(
    connect: ClientFactory, mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        new = f"{read['content']}- Drinks green tea in the morning\n"
        db: AsyncStore = mem.sync.db
        real_get = db.get
        others: list[MemoryFile] = []

        async def read_then_another_writer(user_id: str, kind: FileKind) -> MemoryFile | None:
            seen = await real_get(user_id, kind)
            # Once, after the tool's own read; the other writer's reads are left alone.
            monkeypatch.setattr(db, "get", real_get)
            others.append(await mem.sync.frontend_edit(user_id, kind, new, read["version"]))
            return seen

        monkeypatch.setattr(db, "get", read_then_another_writer)
        arguments: dict[str, Any] = {
            "name": "memory",
            "content": new,
            "expected_version": read["version"],
        }
        result = await ok(client, "memory_write", arguments)
    [other] = others
    assert (other.changed, other.version) == (True, read["version"] + 1)
    # The tool judged the write against the copy it read (a change), yet wrote nothing.
    said = f"No change: MEMORY.md already holds this text (version {other.version})."
    assert text(result) == said
    assert result.structured_content == {
        "name": "memory",
        "file_type": "memory_md",
        "version": other.version,
    }
    assert stored(mem, "alice", FileKind.MEMORY) == (new, other.version)
    sandbox = mem.sandboxes.for_user("alice", None)
    assert await sandbox.read_text("MEMORY.md") == new

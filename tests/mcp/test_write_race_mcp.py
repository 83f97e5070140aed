"""MCP ``memory_write`` of a text the file holds already, on an older version: racing
another writer of the same text, and retried after it landed, through the SDK's client.

The tool reads the stored file, judges the write against it, then writes. When another
writer (a person's PUT, a retry of this very call) stores the same text in between, the
write is based on an older version of a file that holds its text: by default the REST
409's rule, a ``version_conflict`` whose words tell the model its text is stored and
there is nothing to do (``same_content`` in its data); with
``MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged`` "No change" at the version that writer made.
Either way no version is added (``memory.same_text.unchanged_write``). The real runtime
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


def _landed(version: int, expected: int) -> str:
    return (
        f"error: version conflict on MEMORY.md: expected version {expected}, found version "
        f"{version}, which holds this text already: your write is stored (an earlier try of "
        f"it landed), nothing to do. To change the file further, write on "
        f"expected_version={version}."
    )


@pytest.mark.parametrize("rule", ["conflict", "unchanged"])
async def test_a_write_whose_text_landed_meanwhile(
    connect: ClientFactory, mem: Memstrata, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    monkeypatch.setattr(mem.store, "same_text_stale_version", rule)
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
        result = await client.call_tool("memory_write", arguments)
    [other] = others
    assert (other.changed, other.version) == (True, read["version"] + 1)
    # The tool judged the write against the copy it read (a change), yet wrote nothing.
    if rule == "conflict":
        assert result.is_error
        assert text(result) == _landed(other.version, read["version"])
        assert result.structured_content == {
            "error": "version_conflict",
            "expected_version": read["version"],
            "current_version": other.version,
            "same_content": True,
        }
    else:
        assert not result.is_error
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


@pytest.mark.parametrize("rule", ["conflict", "unchanged"])
async def test_a_retry_of_a_write_that_landed(
    connect: ClientFactory, mem: Memstrata, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    """The same call twice (its first answer lost): on the version it read, which is now
    stale; the same call again on the current version is "No change" by either rule."""
    monkeypatch.setattr(mem.store, "same_text_stale_version", rule)
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        new = f"{read['content']}- Drinks green tea in the morning\n"
        call = {"name": "memory", "content": new, "expected_version": read["version"]}
        first = await ok(client, "memory_write", call)
        assert (first.structured_content or {})["version"] == read["version"] + 1
        retry = await client.call_tool("memory_write", call)
        current = {**call, "expected_version": read["version"] + 1}
        on_current = await ok(client, "memory_write", current)
    version = read["version"] + 1
    no_change = f"No change: MEMORY.md already holds this text (version {version})."
    if rule == "conflict":
        assert retry.is_error and text(retry) == _landed(version, read["version"])
        assert (retry.structured_content or {})["same_content"] is True
    else:
        assert not retry.is_error and text(retry) == no_change
    assert text(on_current) == no_change
    assert stored(mem, "alice", FileKind.MEMORY) == (new, version)

"""A memory tool holds its sandbox's lock across its sandbox write and the read-back, so
another process's push cannot land in between: that push erased the entry, and the
read-back, finding the file equal to the DB, still answered "Recorded"."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService

pytestmark = pytest.mark.anyio

USER = "alice"


async def test_a_tool_waits_for_another_processs_push_and_both_entries_stay(
    store: MemoryStore, tmp_path: Path
) -> None:
    agent_host = SyncService(store, LocalSandboxProvider(tmp_path))
    replica = SyncService(store, LocalSandboxProvider(tmp_path))  # another process
    await agent_host.start_session(USER)
    box = agent_host.sandboxes.for_user(USER)
    tools = MemoryTools(ToolContext.bind(USER, agent_host, box, rounds=False))
    file = store.get_memory_file(USER, FileKind.MEMORY)
    assert file is not None

    replica_box = replica.sandboxes.for_user(USER)
    async with replica.sandbox_lock(replica_box):  # the replica's push is under way
        call = asyncio.create_task(tools.call("record_memory", {"content": "AGENT-ENTRY"}))
        await asyncio.sleep(0.5)
        assert not call.done()  # it waits instead of writing under the push
        # what the push writes meanwhile: the human's line, in the DB and the sandbox
        pushed = store.upsert_memory_file(USER, FileKind.MEMORY, file.content + "- HUMAN-LINE\n")
        await replica_box.write_text("MEMORY.md", pushed.content)
    answer = await asyncio.wait_for(call, 30)

    assert str(answer).startswith("Recorded"), answer
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.version > pushed.version
    assert "AGENT-ENTRY" in stored.content and "- HUMAN-LINE\n" in stored.content
    assert "AGENT-ENTRY" in (await box.read_text("MEMORY.md") or "")

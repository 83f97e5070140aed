"""``record_memory`` with ``replaces`` and empty content removes that one entry of
MEMORY.md, against a real DB and sandbox; empty content without ``replaces`` says which
call removes an entry."""

from __future__ import annotations

import pytest

from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

MEETING = "- 2026-02-06: 每周四下午和王老师开会\n"


async def test_empty_content_with_replaces_removes_the_entry(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = FULL_MEMORY.replace("## Ongoing\n", f"## Ongoing\n{MEETING}")
    version = await given(sync, FileKind.MEMORY, text)

    answer = await tools.call(
        "record_memory", {"content": "", "replaces": "每周四下午和王老师开会"}
    )

    assert answer == (
        "Removed the entry '2026-02-06: 每周四下午和王老师开会' from MEMORY.md under "
        f"## Ongoing (version {version + 1})."
    )
    assert memory(store) == (FULL_MEMORY, version + 1)


async def test_a_removed_multi_line_entry_is_quoted_whole(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.record_memory("  ", replaces="vendor contract 49")

    assert not answer.failed and answer.startswith("Removed the entry '2026-02-04: Reviewing")
    assert "It runs out in June" in answer and "under ## Ongoing" in answer
    assert "vendor" not in memory(store)[0] and memory(store)[1] == version + 1


async def test_an_unmatched_replaces_stays_an_error(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.record_memory("", replaces="no such entry anywhere")

    assert answer.failed and answer.startswith("error: replaces matches no entry of MEMORY.md")
    assert memory(store) == (FULL_MEMORY, version)


async def test_empty_content_without_replaces_says_how_to_remove(tools: MemoryTools) -> None:
    answer = await tools.call("record_memory", {"content": ""})

    assert answer == (
        "error: content must not be empty; to remove an entry, pass its text as replaces "
        "with empty content"
    )

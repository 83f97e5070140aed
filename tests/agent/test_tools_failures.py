"""The memory tools when a part fails, against a real DB and real sandbox directories: the
sandbox or the database down, a human editing the file during the tool's write."""

from __future__ import annotations

import logging

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import DAY
from tests.sandbox.support import USER, FaultySandbox, unreachable_store

pytestmark = pytest.mark.anyio


# -- failure paths -------------------------------------------------------------------------------


async def test_sandbox_write_failure_saves_to_the_db_directly(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    templates: TemplateSet,
) -> None:
    await sync.start_session(USER)
    box = FaultySandbox(
        provider.for_user(USER),
        error=OSError(28, "No space left on device"),
        fail=lambda path, op: op == "write",
    )
    tools = MemoryTools(ToolContext.bind(USER, sync, box), today=lambda: DAY)

    result = await tools.record_memory("disk is full", section="Lessons")

    assert result == (
        "Recorded in MEMORY.md under ## Lessons (version 2). The workspace copy could not be "
        "updated; it is refreshed next session."
    )
    assert not result.failed
    content, version = memory(store)
    assert version == 2 and content.endswith("## Lessons\n- 2026-03-01: disk is full\n")
    assert await box.inner.read_text("MEMORY.md") == templates.load(FileKind.MEMORY)
    # ...and the next session brings the sandbox up to date instead of reverting the DB.
    await sync.start_session(USER)
    assert await box.inner.read_text("MEMORY.md") == content
    assert memory(store) == (content, 2)


async def test_sandbox_and_db_both_down(
    templates: TemplateSet, provider: LocalSandboxProvider
) -> None:
    sync = SyncService(unreachable_store(templates), provider)
    box = FaultySandbox(provider.for_user(USER), error=OSError(5, "I/O error"))
    tools = MemoryTools(ToolContext.bind(USER, sync, box), today=lambda: DAY)
    result = await tools.record_memory("x")
    assert result == "error: MEMORY.md cannot be read right now (OperationalError); try later"
    assert result.failed


async def test_db_down_keeps_the_edit_in_the_workspace(
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await user_box.write_text("MEMORY.md", "# Memory\n")
    sync = SyncService(unreachable_store(templates), provider)
    tools = MemoryTools(ToolContext.bind(USER, sync, user_box), today=lambda: DAY)
    caplog.set_level(logging.INFO, logger="memstrata")
    result = await tools.record_memory("offline note")
    # The DB is asked once per call (the refresh before the edit), not again after the
    # sandbox write: each attempt can wait out the connect timeout, and each was logged.
    found = [event_fields(r) for r in caplog.records if event_fields(r)]
    assert [(f["event"], f["result"]) for f in found] == [("sync.file", "db_unavailable")]
    assert result == (
        "Recorded in MEMORY.md under ## Notes in the workspace; storage is unreachable, "
        "it will be saved later."
    )
    assert not result.failed  # the round end stores it
    assert (
        await user_box.read_text("MEMORY.md")
        == "# Memory\n\n## Notes\n- 2026-03-01: offline note\n"
    )


async def human_edit_during_the_tools_write(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider, human: str
) -> tuple[MemoryTools, LocalDirectorySandbox]:
    """Tools for session s1 whose next sandbox write lets a frontend edit land first, from
    another process (it does not know session s1, so nothing is mirrored into it): the
    tool's text is then based on the version before the human's."""
    await sync.start_session(USER, "s1")
    box = provider.for_user(USER, "s1")
    write = box.write_text

    async def write_after_the_human(path: str, content: str) -> None:
        box.write_text = write  # type: ignore[method-assign]  # once: the tool's own write
        await SyncService(store, provider).frontend_edit(USER, "memory", human)
        await write(path, content)

    box.write_text = write_after_the_human  # type: ignore[method-assign]
    ctx = ToolContext.bind(USER, sync, box, session_id="s1")
    return MemoryTools(ctx, today=lambda: DAY), box


async def test_overlapping_human_edit_is_reported_to_the_model(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    templates: TemplateSet,
) -> None:
    human = templates.load(FileKind.MEMORY).replace("## Decisions\n", "## Decisions (human)\n")
    tools, box = await human_edit_during_the_tools_write(sync, store, provider, human)

    result = await tools.record_memory("agent entry", section="Decisions")

    assert result.startswith(
        "Not saved: the user edited MEMORY.md at the same time and the edits overlap. Their "
        "version was kept (the DB copy won; the agent's copy was saved to "
        ".memstrata/conflicts/MEMORY.md."
    )
    assert result.endswith("Read MEMORY.md again and reapply your change if it is still needed.")
    assert result.failed  # no "error:", yet nothing of the agent's was stored
    assert memory(store) == (human, 2)
    assert await box.read_text("MEMORY.md") == human


async def test_non_overlapping_human_edit_is_merged(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    templates: TemplateSet,
) -> None:
    human = templates.load(FileKind.MEMORY).replace("## Lessons\n", "## Lessons\n- human\n")
    tools, _ = await human_edit_during_the_tools_write(sync, store, provider, human)

    result = await tools.record_memory("agent entry", section="Decisions")

    assert result == (
        "Recorded in MEMORY.md under ## Decisions (version 3), merged with an edit the user "
        "made at the same time."
    )
    expected = human.replace("## Decisions\n", "## Decisions\n- 2026-03-01: agent entry\n")
    assert memory(store) == (expected, 3)

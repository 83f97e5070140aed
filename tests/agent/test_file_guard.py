"""Guarded file tools (a platform's own write_file wrapped) against a real DB and real
sandbox directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstrata.agent.file_guard import GuardedFileTools
from memstrata.agent.tools import ToolContext
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.base import normalise_sandbox_path
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.sandbox.support import (
    USER,
    FaultySandbox,
    unreachable_store,
)

pytestmark = pytest.mark.anyio


# -- guarded file tools -------------------------------------------------------------------------


def platform_write_file(root: Path, calls: list[str]) -> Any:
    """A platform's own write_file: writes under the sandbox root, knows nothing of memory."""

    async def write_file(path: str, content: str) -> str:
        calls.append(path)
        relative = normalise_sandbox_path(path)
        assert relative is not None
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {path}"

    return write_file


@pytest.fixture
async def guarded(sync: SyncService, user_box: LocalDirectorySandbox) -> GuardedFileTools:
    await sync.start_session(USER)
    tracker = await sync.begin_round(USER)
    return GuardedFileTools(ToolContext.bind(USER, sync, user_box, tracker=tracker))


@pytest.mark.parametrize("path", ["AGENTS.md", "/workspace/AGENTS.md", "./notes/../AGENTS.md"])
async def test_guard_refuses_the_root_agents_md(
    path: str, guarded: GuardedFileTools, user_box: LocalDirectorySandbox, templates: TemplateSet
) -> None:
    calls: list[str] = []
    write_file = guarded.wrap(platform_write_file(user_box.root, calls))
    result = await write_file(path=path, content="no rules")
    assert result == (
        "error: AGENTS.md is managed by the platform and restored every session; put what you "
        "want to keep in MEMORY.md (or USER.md for facts about the user)"
    )
    assert calls == []
    assert await user_box.read_text("AGENTS.md") == templates.agents_md()


async def test_guard_case_follows_the_sandbox(
    sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    calls: list[str] = []
    sensitive = GuardedFileTools(ToolContext.bind(USER, sync, user_box))
    assert sensitive.case_sensitive is True  # a Linux directory
    write = sensitive.wrap(platform_write_file(user_box.root, calls))
    answer = await write("agents.md", "fine")  # written, with a note that it is not AGENTS.md
    assert answer.startswith("wrote 4 characters to agents.md\nnote: agents.md is not AGENTS.md")
    folding = FaultySandbox(user_box)
    folding.case_sensitive = False  # a case-insensitive mount
    insensitive = GuardedFileTools(ToolContext.bind(USER, sync, folding))
    assert insensitive.case_sensitive is False
    write = insensitive.wrap(platform_write_file(user_box.root, calls))
    assert (await write("agents.md", "no")).startswith("error: AGENTS.md is managed")
    assert calls == ["agents.md"]


async def test_guard_syncs_memory_writes_at_once(
    guarded: GuardedFileTools, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    calls: list[str] = []
    write_file = guarded.wrap(platform_write_file(user_box.root, calls))
    assert write_file.__name__ == "write_file"

    result = await write_file("/workspace/USER.md", "- Name: Ada\n")

    assert result == "wrote 12 characters to /workspace/USER.md"
    assert user_md(store) == ("- Name: Ada\n", 2)
    assert guarded.ctx.tracker.dirty == frozenset({"USER.md"})


async def test_guard_leaves_other_files_alone(
    guarded: GuardedFileTools, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    calls: list[str] = []
    write_file = guarded.wrap(platform_write_file(user_box.root, calls))
    assert await write_file(path="notes/USER.md", content="x") == (
        "wrote 1 characters to notes/USER.md"
    )
    assert await user_box.read_text("notes/USER.md") == "x"
    assert guarded.ctx.tracker.dirty == frozenset()
    assert user_md(store)[1] == 1


async def test_guard_lets_platform_errors_through_without_syncing(
    guarded: GuardedFileTools, store: MemoryStore
) -> None:
    async def failing_edit_file(path: str, old: str, new: str) -> str:
        raise FileNotFoundError(path)

    edit_file = guarded.wrap(failing_edit_file)
    with pytest.raises(FileNotFoundError):
        await edit_file(path="MEMORY.md", old="a", new="b")
    assert guarded.ctx.tracker.dirty == frozenset({"MEMORY.md"})
    assert memory(store)[1] == 1


async def test_guard_appends_a_note_when_the_sync_did_not_store_the_write(
    templates: TemplateSet, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    offline = SyncService(unreachable_store(templates), provider)
    calls: list[str] = []
    write_file = GuardedFileTools(ToolContext.bind(USER, offline, user_box)).wrap(
        platform_write_file(user_box.root, calls)
    )
    result = await write_file("MEMORY.md", "m")
    assert result == (
        "wrote 1 characters to MEMORY.md\n[memory sync] Written in the workspace; storage is "
        "unreachable, it will be saved later."
    )

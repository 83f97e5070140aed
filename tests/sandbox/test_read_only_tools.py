"""Memstrata's own agent tools are tools it can see into.

A round end asks the sandbox which synced files are missing only after a tool memstrata
cannot see into ran (a shell's ``mv MEMORY.md memory.md``). ``memory_search``,
``memory_read`` and ``skills_list`` read, ``memory_write``, ``skill_set`` and
``conversation_index_turn`` write the database: none moves a file, so a round that called
only those (or memory tools) opens no sandbox at its end. Real database, real directory
sandboxes.
"""

from __future__ import annotations

import pytest

from memstrata.agent.session import open_agent_session
from memstrata.errors import SandboxError
from memstrata.mcp.tools import TOOLS
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.dirty import (
    NO_FILE_TOOLS,
    READ_ONLY_TOOLS,
    TOOL_FILES,
    RoundTracker,
    mark_missing,
)
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER, FaultyProvider, FaultySandbox, sync_events

pytestmark = pytest.mark.anyio


def test_the_read_only_tools_are_the_registrys() -> None:
    """One list, checked against the MCP registry's read-only annotations: a read-only
    tool added there and not here would make every round that calls it ask the sandbox."""
    registry = {tool.name for tool in TOOLS if tool.annotations.read_only_hint}
    assert READ_ONLY_TOOLS == registry == {"memory_search", "memory_read", "skills_list"}


def test_every_mcp_tool_is_one_memstrata_sees_into() -> None:
    """Each tool of the MCP registry is a memory tool (it marks its file) or one that moves
    no file: a tool added there and in neither list would make every round that calls it
    ask the sandbox which files are missing."""
    registry = {tool.name for tool in TOOLS}
    assert registry == set(TOOL_FILES) | NO_FILE_TOOLS
    assert not set(TOOL_FILES) & NO_FILE_TOOLS


@pytest.mark.parametrize(
    ("calls", "asks"),
    [
        (["memory_search", "memory_read", "skills_list"], False),
        (["memory_read", "record_memory"], False),
        (["memory_search", "bash"], True),
        (["skill_set"], False),  # writes a database row, moves no file
        (["memory_write"], False),  # a person's write path: its mirror pushes the file
        (["conversation_index_turn"], False),
        (["memory_write", "run_script"], True),
    ],
)
def test_only_unseen_tools_ask_for_missing_files(calls: list[str], asks: bool) -> None:
    tracker = RoundTracker(USER, None, case_sensitive=True)
    for name in calls:
        tracker.on_tool_call(name, {"query": "x"})
    for name in tracker.dirty:
        tracker.mark_synced(name)  # the memory tool's own sync
    assert tracker.asks_for_missing is asks


async def test_a_round_of_memstratas_own_tools_opens_no_sandbox(
    store: MemoryStore, provider: LocalSandboxProvider, caplog: pytest.LogCaptureFixture
) -> None:
    faulty = FaultyProvider(provider)
    sync = SyncService(store, faulty)
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    faulty.raise_on_for_user = SandboxError("the sandbox host is down")
    session.on_tool_call("memory_search", {"query": "plans"})
    session.on_tool_call("memory_read", '{"name": "memory"}')
    session.on_tool_call("skill_set", {"name": "x", "enabled": True})
    session.on_tool_call("memory_write", {"name": "memory", "content": "x"})
    session.on_tool_call("conversation_index_turn", {"session_id": "s1"})

    assert await session.end_round() == []

    assert sync_events(caplog, "sync.sandbox_unavailable") == []
    session.close()


async def test_a_shell_round_does_not_make_later_rounds_ask(
    store: MemoryStore, provider: LocalSandboxProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """A round end that found every file there reads nothing back and starts no new round
    in the tracker: the shell's flag must not outlive the question it asked."""
    faulty = FaultyProvider(provider)
    sync = SyncService(store, faulty)
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    session.on_tool_call("bash", {"command": "ls"})
    assert await session.end_round() == []  # asked: every file is there
    faulty.raise_on_for_user = SandboxError("the sandbox host is down")
    session.on_tool_call("memory_search", {"query": "plans"})

    assert await session.end_round() == []

    assert sync_events(caplog, "sync.sandbox_unavailable") == []
    session.close()


async def test_a_sandbox_that_cannot_answer_is_asked_again(
    provider: LocalSandboxProvider,
) -> None:
    tracker = RoundTracker(USER, None, case_sensitive=True)
    tracker.on_tool_call("bash", {"command": "mv MEMORY.md memory.md"})
    broken = FaultySandbox(provider.for_user(USER, None), SandboxError("down"))

    assert await mark_missing(tracker, broken) == []

    assert tracker.asks_for_missing

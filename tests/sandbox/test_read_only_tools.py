"""Memstrata's own read-only agent tools are tools it can see into.

A round end asks the sandbox which synced files are missing only after a tool memstrata
cannot see into ran (a shell's ``mv MEMORY.md memory.md``). ``memory_search``,
``memory_read`` and ``skills_list`` move no file: a round that called only those (or
memory tools) opens no sandbox at its end. Real database, real directory sandboxes.
"""

from __future__ import annotations

import pytest

from memstrata.agent.session import open_agent_session
from memstrata.errors import SandboxError
from memstrata.mcp.tools import TOOLS
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.dirty import READ_ONLY_TOOLS, RoundTracker
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER, FaultyProvider, sync_events

pytestmark = pytest.mark.anyio


def test_the_read_only_tools_are_the_registrys() -> None:
    """One list, checked against the MCP registry's read-only annotations: a read-only
    tool added there and not here would make every round that calls it ask the sandbox."""
    registry = {tool.name for tool in TOOLS if tool.annotations.read_only_hint}
    assert READ_ONLY_TOOLS == registry == {"memory_search", "memory_read", "skills_list"}


@pytest.mark.parametrize(
    ("calls", "asks"),
    [
        (["memory_search", "memory_read", "skills_list"], False),
        (["memory_read", "record_memory"], False),
        (["memory_search", "bash"], True),
        (["skill_set"], True),  # not read-only: as unseen as any other tool
    ],
)
def test_only_unseen_tools_ask_for_missing_files(calls: list[str], asks: bool) -> None:
    tracker = RoundTracker(USER, None, case_sensitive=True)
    for name in calls:
        tracker.on_tool_call(name, {"query": "x"})
    for name in tracker.dirty:
        tracker.mark_synced(name)  # the memory tool's own sync
    assert tracker.asks_for_missing is asks


async def test_a_round_of_read_only_tools_opens_no_sandbox(
    store: MemoryStore, provider: LocalSandboxProvider, caplog: pytest.LogCaptureFixture
) -> None:
    faulty = FaultyProvider(provider)
    sync = SyncService(store, faulty)
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    faulty.raise_on_for_user = SandboxError("the sandbox host is down")
    session.on_tool_call("memory_search", {"query": "plans"})
    session.on_tool_call("memory_read", '{"name": "memory"}')

    assert await session.end_round() == []

    assert sync_events(caplog, "sync.sandbox_unavailable") == []
    session.close()

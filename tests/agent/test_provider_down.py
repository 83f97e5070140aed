"""A sandbox provider whose ``for_user`` raises: the session and the MCP tools carry on.

A platform's provider may look its sandbox up on a remote host (or refuse an unknown user)
and raise. Sync already took that as a failing sandbox; ``open_agent_session`` and the MCP
agent tools called the provider themselves and passed the exception up, so the DB
fallback (the tools write the DB directly) was never reached.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp import Client

from memstrata.agent.session import open_agent_session
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.mcp import build_server
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.runtime import Memstrata
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import USER, warning_events

pytestmark = pytest.mark.anyio

STORED_NOT_MIRRORED = (
    "Recorded in MEMORY.md under ## Notes (version 2). The workspace copy could not be "
    "updated; it is refreshed next session."
)


class NoSandboxes:
    """A provider whose sandbox host is down."""

    def for_user(self, user_id: str, session_id: str | None = None) -> Sandbox:
        raise ConnectionError(f"sandbox host for {user_id} unreachable")


async def test_a_session_opens_on_the_db_and_its_tools_write_the_db(
    store: MemoryStore, logs: pytest.LogCaptureFixture
) -> None:
    sync = SyncService(store, NoSandboxes())

    session = await open_agent_session(sync, USER, token_limit=50_000)

    assert '<file name="MEMORY.md">' in session.prompt.text  # from the DB, just provisioned
    assert {r.outcome for r in session.start_results} == {Outcome.SANDBOX_FAILED}
    unavailable = [w for w in warning_events(logs) if w["event"] == "sync.sandbox_unavailable"]
    assert unavailable and unavailable[0]["user_id"] == USER
    assert unavailable[0]["error"] == f"ConnectionError: sandbox host for {USER} unreachable"
    answer = await session.tools.call("record_memory", {"content": "works without a sandbox"})
    assert answer == STORED_NOT_MIRRORED
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and "works without a sandbox\n" in stored.content
    results = await session.end_round()  # the read-back fails too, and says so
    assert {r.filename: r.outcome for r in results}["MEMORY.md"] is Outcome.SANDBOX_FAILED


@pytest.fixture
def mem_without_sandboxes(settings: Settings, db: Database) -> Iterator[Memstrata]:
    runtime = Memstrata.open(settings, database=db, sandboxes=NoSandboxes(), embedder=None)
    yield runtime
    runtime.close()


async def test_mcp_agent_tools_write_the_db(mem_without_sandboxes: Memstrata) -> None:
    mem = mem_without_sandboxes
    server = build_server(lambda: mem, lambda _ctx: "alice")
    async with Client(server) as client:
        result = await client.call_tool("record_memory", {"content": "works without a sandbox"})
        prompt = await client.get_prompt("memory_context", {"token_limit": "32000"})

    first = result.content[0]
    assert first.type == "text" and first.text == STORED_NOT_MIRRORED
    assert not result.is_error
    stored = mem.store.get_memory_file("alice", FileKind.MEMORY)
    assert stored is not None and "works without a sandbox\n" in stored.content
    [message] = prompt.messages
    assert message.content.type == "text" and "works without a sandbox" in message.content.text

"""Two processes on one sandbox (replicas sharing a data directory, or an API replica and an
agent host): each sync of the sandbox holds its ``exclusive()`` lock, so neither reads what
the other is about to replace (review H1, H2).

"Another process" is a second SyncService with a provider of its own over the same database
and sandbox root: only the kernel's ``flock`` is shared, as between two processes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memstrata.agent.session import open_agent_session
from memstrata.errors import SandboxError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.exclusive import LOCK_FILE
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.sync import SyncService
from memstrata.sandbox.timed import with_deadline
from tests.sandbox.races import HookedProvider
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio


def stored(store: MemoryStore, kind: FileKind) -> str:
    file = store.get_memory_file(USER, kind)
    assert file is not None
    return file.content


async def test_the_lock_excludes_another_process_and_lets_its_holder_in_again(
    sandbox_root: Path,
) -> None:
    provider = LocalSandboxProvider(sandbox_root)
    other = LocalSandboxProvider(sandbox_root).for_user(USER)  # another process's handle
    entered = asyncio.Event()

    async def other_process() -> None:
        async with other.exclusive():
            entered.set()

    async with provider.for_user(USER).exclusive():
        # Its holder passes again, through any handle of the same provider (a tool holding
        # it across its write and the sync that takes it again).
        async with provider.for_user(USER).exclusive():
            waiting = asyncio.create_task(other_process())
            await asyncio.sleep(0.2)
            assert not entered.is_set()
        await asyncio.sleep(0.1)
        assert not entered.is_set()  # the inner exit did not release it
    await asyncio.wait_for(waiting, 5)
    assert (provider.directory_for(USER) / LOCK_FILE).is_file()
    async with provider.for_user(USER, "s1").exclusive(), other.exclusive():
        pass  # a session's sandbox has a lock of its own


async def test_the_deadline_bounds_the_wait_for_a_lock_held_elsewhere(sandbox_root: Path) -> None:
    timed = with_deadline(LocalSandboxProvider(sandbox_root), 0.3).for_user(USER)
    other = LocalSandboxProvider(sandbox_root).for_user(USER)
    async with other.exclusive():
        with pytest.raises(SandboxError, match="another process holds its lock"):
            async with timed.exclusive():
                pass
    async with timed.exclusive(), timed.exclusive():
        assert await timed.read_text("USER.md") is None  # taken once free; re-entrant


async def test_a_sync_whose_sandbox_stays_locked_fails_like_a_sandbox(
    store: MemoryStore, sandbox_root: Path
) -> None:
    sync = SyncService(store, with_deadline(LocalSandboxProvider(sandbox_root), 0.3))
    await sync.start_session(USER)
    other = LocalSandboxProvider(sandbox_root).for_user(USER)
    async with other.exclusive():
        result = await sync.after_controlled_write(USER, "USER.md")
    assert result.outcome is Outcome.SANDBOX_FAILED and "lock" in (result.detail or "")


async def test_a_frontend_edit_on_one_replica_and_a_tool_on_the_agent_host_lose_nothing(
    store: MemoryStore, sandbox_root: Path
) -> None:
    # Review H1: the replica's mirror has read USER.md and not yet its base record when the
    # agent host's update_user refreshes the sandbox, writes its entry and records its base;
    # the mirror then wrote its stale read back over both acknowledged writes.
    agent_host = SyncService(store, LocalSandboxProvider(sandbox_root))
    replica_provider = HookedProvider(LocalSandboxProvider(sandbox_root))
    replica = SyncService(store, replica_provider)
    session = await open_agent_session(agent_host, USER, token_limit=50_000)
    paused, go_on = asyncio.Event(), asyncio.Event()

    async def slow_disk() -> None:
        paused.set()
        await go_on.wait()

    replica_provider.hooks[(None, "read", ".memstrata/base/USER.md.json")] = slow_disk
    file, _ = await replica.read_file(USER, FileKind.USER)
    put = asyncio.create_task(
        replica.frontend_edit(USER, "user", file.content + "- HUMAN-LINE\n", file.version)
    )
    await paused.wait()
    session.on_tool_call("update_user", {})
    arguments = {"section": "Profile", "key": "Tz", "content": "AGENT-VALUE"}
    tool = asyncio.create_task(session.tools.call("update_user", arguments))
    done, _ = await asyncio.wait({tool}, timeout=2)
    assert not done  # the tool's sync waits for the replica's
    go_on.set()
    await put
    answer = await tool

    text = stored(store, FileKind.USER)
    assert "- HUMAN-LINE\n" in text and "AGENT-VALUE" in text, answer
    assert (LocalSandboxProvider(sandbox_root).directory_for(USER) / "USER.md").read_text() == text
    assert not list(sandbox_root.glob("**/.memstrata/conflicts/*"))


async def test_a_write_and_its_sync_held_under_the_lock_cannot_be_pushed_over(
    store: MemoryStore, sandbox_root: Path
) -> None:
    # Review H2, with the change agent/tools.py needs: the tool holds the sandbox lock
    # across its sandbox write and its sync. Another process's push of a frontend edit then
    # waits, and reads the entry instead of replacing it.
    agent_host = SyncService(store, LocalSandboxProvider(sandbox_root))
    replica = SyncService(store, LocalSandboxProvider(sandbox_root))
    await agent_host.start_session(USER)
    box = agent_host.sandboxes.for_user(USER)
    file, _ = await replica.read_file(USER, FileKind.MEMORY)

    async with agent_host.user_lock(USER), agent_host.sandbox_lock(box):
        text = await box.read_text("MEMORY.md")
        await box.write_text("MEMORY.md", f"{text}- AGENT-ENTRY\n")
        put = asyncio.create_task(
            replica.frontend_edit(USER, "memory", file.content + "- HUMAN-LINE\n", file.version)
        )
        await asyncio.sleep(0.3)  # its DB write lands; its mirror waits for the sandbox
        result = await agent_host.after_controlled_write(USER, "MEMORY.md", sandbox=box)
    await put

    assert result.outcome is Outcome.MERGED
    text = stored(store, FileKind.MEMORY)
    assert "- AGENT-ENTRY\n" in text and "- HUMAN-LINE\n" in text

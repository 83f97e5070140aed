"""Writes made from a copy a push has since replaced, and edits made while a push is under
way (one process): neither loses the human's acknowledged edit nor the agent's.

Real database, real directories, the real agent session and tools. Found by randomized
interleavings (review H3, M1, L1): a whole-file ``write_file`` composed from a read made
before a frontend edit's push reverted that edit; an ``echo >>`` made while a push stored
its merge was overwritten; a shell edit in a session's last round never reached the DB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.agent.session import AgentSession, open_agent_session
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox import sessions as sessions_module
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.state import read_base
from memstrata.sandbox.sync import SyncService
from tests.sandbox.races import HookedProvider
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

USER_MD = FileKind.USER.filename
HUMAN = "- HUMAN-LINE\n"
AGENT = "- AGENT-LINE\n"


def stored(store: MemoryStore, kind: FileKind = FileKind.USER) -> str:
    file = store.get_memory_file(USER, kind)
    assert file is not None
    return file.content


async def human_appends(sync: SyncService, line: str = HUMAN) -> None:
    """The user saves the page with one more line (If-Match): acknowledged."""
    file, _ = await sync.read_file(USER, FileKind.USER)
    await sync.frontend_edit(USER, "user", file.content + line, file.version)


async def write_file(session: AgentSession, box_path: Path, content: str, *, guarded: bool) -> str:
    """The platform's own whole-file ``write_file``, through the guard or not."""

    async def platform_write_file(path: str, content: str) -> str:
        (box_path / path).write_text(content)
        return "ok"

    session.on_tool_call("write_file", {"path": USER_MD})
    if guarded:
        answer = await session.file_tools.wrap(platform_write_file)(path=USER_MD, content=content)
        return str(answer)
    return await platform_write_file(USER_MD, content)


def conflict_copies(provider: LocalSandboxProvider) -> list[Path]:
    return sorted(provider.directory_for(USER).glob("**/.memstrata/conflicts/*"))


# -- H3: a whole-file write composed before a push ------------------------------------------


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
async def test_a_whole_file_write_from_a_read_before_a_push_keeps_the_human_edit(
    guarded: bool, sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, token_limit=50_000, session_id="s1")
    box = provider.directory_for(USER, "s1")
    seen = (box / USER_MD).read_text()  # the agent reads USER.md (start of its turn)
    await human_appends(sync)  # acknowledged, pushed to s1
    assert HUMAN in (box / USER_MD).read_text()

    new = seen.replace("## Profile\n", "## Profile\n" + AGENT, 1)  # what it read + a line
    await write_file(session, box, new, guarded=guarded)
    await session.end_round()
    session.close()

    text = stored(store)
    assert HUMAN in text and AGENT in text
    assert (box / USER_MD).read_text() == text
    assert conflict_copies(provider) == []


async def test_the_replaced_copy_is_forgotten_at_the_next_write_back(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, token_limit=50_000, session_id="s1")
    box = provider.directory_for(USER, "s1")
    await human_appends(sync)
    handle = provider.for_user(USER, "s1")
    record = await read_base(handle, USER_MD)
    assert record is not None and record.previous is not None  # kept after the push landed

    # The agent reads after the push and adds a line: written back, a new base.
    current = (box / USER_MD).read_text()
    await write_file(session, box, current + AGENT, guarded=True)
    record = await read_base(handle, USER_MD)
    assert record is not None and record.previous is None
    # From now on removing the human's line is an edit like any other.
    await write_file(session, box, (current + AGENT).replace(HUMAN, ""), guarded=True)
    assert HUMAN not in stored(store) and AGENT in stored(store)


async def test_an_agent_removing_a_pushed_line_at_once_gets_it_back(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # The documented cost: until the sandbox's next write-back, a copy without the pushed
    # line cannot be told from one composed before the push; the human's line stays.
    session = await open_agent_session(sync, USER, token_limit=50_000, session_id="s1")
    box = provider.directory_for(USER, "s1")
    await human_appends(sync)
    current = (box / USER_MD).read_text()

    answer = await write_file(session, box, current.replace(HUMAN, ""), guarded=True)

    assert answer == "ok"
    assert HUMAN in stored(store)
    assert (box / USER_MD).read_text() == stored(store)  # pushed back: the copy lagged


async def test_a_memory_tool_may_change_a_pushed_line_at_once(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # A memory tool reads the copy under the lock right before its edit: its sync settles
    # the base, so changing the human's new value is an edit, not a conflict.
    session = await open_agent_session(sync, USER, token_limit=50_000, session_id="s1")
    file, _ = await sync.read_file(USER, FileKind.USER)
    edited = file.content.replace("- Time zone:\n", "- Time zone: UTC\n")
    await sync.frontend_edit(USER, "user", edited, file.version)

    session.on_tool_call("update_user", {})
    arguments = {"section": "Profile", "key": "Time zone", "content": "CET"}
    answer = await session.tools.call("update_user", arguments)

    assert "(version 3)" in str(answer)
    assert "- Time zone: CET\n" in stored(store) and "UTC" not in stored(store)
    assert conflict_copies(provider) == []


# -- M1: an edit made while a push is under way ----------------------------------------------


async def test_an_append_made_while_a_push_is_under_way_is_merged_not_overwritten(
    store: MemoryStore, sandbox_root: Path
) -> None:
    provider = HookedProvider(LocalSandboxProvider(sandbox_root))
    sync = SyncService(store, provider)
    await sync.start_session(USER, "s1")
    path = provider.inner.directory_for(USER, "s1") / USER_MD
    path.write_text(path.read_text().replace("## Profile\n", "## Profile\n- AGENT-EDIT-1\n"))

    async def echo_append() -> None:  # the mirror stored its merge and is about to push it
        with path.open("a") as shell:
            shell.write("- AGENT-EDIT-2\n")

    provider.hooks[("s1", "write", ".memstrata/base/USER.md.json")] = echo_append
    await human_appends(sync)

    text = stored(store)
    assert all(line in text for line in ("- AGENT-EDIT-1\n", "- AGENT-EDIT-2\n", HUMAN))
    assert path.read_text() == text
    assert not list(sandbox_root.glob("**/.memstrata/conflicts/*"))


async def test_a_file_that_keeps_changing_under_the_push_is_left_as_it_is(
    store: MemoryStore, sandbox_root: Path
) -> None:
    provider = HookedProvider(LocalSandboxProvider(sandbox_root))
    sync = SyncService(store, provider)
    await sync.start_session(USER, "s1")
    path = provider.inner.directory_for(USER, "s1") / USER_MD
    appended: list[str] = []

    async def echo_append() -> None:
        line = f"- AGENT-EDIT-{len(appended)}\n"
        appended.append(line)
        with path.open("a") as shell:
            shell.write(line)
        provider.hooks[("s1", "write", ".memstrata/base/USER.md.json")] = echo_append

    path.write_text(path.read_text() + "- AGENT-EDIT-START\n")
    provider.hooks[("s1", "write", ".memstrata/base/USER.md.json")] = echo_append
    await human_appends(sync)
    provider.hooks.clear()

    assert len(appended) == 3  # decided again at most three times, then left alone
    on_disk = path.read_text()
    assert all(line in on_disk for line in appended)  # nothing overwritten
    results = await sync.read_back_session(USER, "s1")  # a later read-back stores it all
    assert {r.filename: r.outcome for r in results}[USER_MD] is Outcome.MERGED
    assert all(line in stored(store) for line in [*appended, HUMAN, "- AGENT-EDIT-START\n"])


# -- L1: a session's last round ------------------------------------------------------------


async def test_a_shell_edit_in_a_closed_session_reaches_the_db_at_the_next_session_start(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, token_limit=50_000, session_id="conv-1")
    with (provider.directory_for(USER, "conv-1") / "MEMORY.md").open("a") as shell:
        shell.write("- SHELL-NOTE (echo >> MEMORY.md)\n")
    assert await session.end_round() == []  # no dirty flag: nothing read back
    session.close()

    following = await open_agent_session(sync, USER, token_limit=50_000, session_id="conv-2")
    following.close()

    assert "SHELL-NOTE" in stored(store, FileKind.MEMORY)
    assert "SHELL-NOTE" in (provider.directory_for(USER, "conv-2") / "MEMORY.md").read_text()


async def test_a_host_can_read_a_closing_session_back_itself(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, token_limit=50_000, session_id="conv-1")
    with (provider.directory_for(USER, "conv-1") / "MEMORY.md").open("a") as shell:
        shell.write("- SHELL-NOTE\n")
    session.close()

    results = await sync.read_back_session(USER, "conv-1")

    assert {r.filename: r.outcome for r in results}["MEMORY.md"] is Outcome.WRITTEN
    assert "SHELL-NOTE" in stored(store, FileKind.MEMORY)


async def test_closed_sessions_waiting_for_a_read_back_are_bounded(
    store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user who never starts a session again is not kept for the life of the process:
    past the bound the least recently noted users are forgotten."""
    monkeypatch.setattr(sessions_module, "MAX_CLOSED_USERS", 2)
    sync = SyncService(store, LocalSandboxProvider(tmp_path))
    for user in ("u1", "u2", "u3"):
        await sync.start_session(user, "s1")
        sync.end_session(user, "s1")
    assert list(sync._sessions._closed) == ["u2", "u3"]

"""A frontend edit in the agent session's own process settles the agent's unsynced copy in
the mirror (merged, or kept aside): the session's next round end reports that outcome as
it reports its own read-back's, the same as when the edit comes from another process."""

from __future__ import annotations

import gc
import weakref

import pytest

from memstrata.agent.session import AgentSession, open_agent_session
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import Outcome, SyncResult, SyncService
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

# The frontend edit's writer: this session's own service, or another process (a second
# service on the same DB and sandboxes, which knows nothing of this process's sessions).
WRITERS = ["this process", "another process"]


@pytest.fixture
def other(db: Database, templates: TemplateSet, provider: LocalSandboxProvider) -> SyncService:
    return SyncService(MemoryStore(db.sessions, templates), provider)


def filled(text: str, field: str, value: str) -> str:
    """USER.md's template with ``- field:`` filled in."""
    assert f"- {field}:\n" in text
    return text.replace(f"- {field}:\n", f"- {field}: {value}\n", 1)


async def agent_fills(session: AgentSession, box: LocalDirectorySandbox, field: str) -> None:
    """An unguarded edit_file of USER.md, reported to the tracker as the host does."""
    text = await box.read_text("USER.md")
    assert text is not None
    await box.write_text("USER.md", filled(text, field, "agent says so"))
    session.on_tool_call("edit_file", {"file_path": "USER.md"})


async def human_fills(sync: SyncService, store: MemoryStore, field: str) -> None:
    file = store.get_memory_file(USER, FileKind.USER)
    assert file is not None
    content = filled(file.content, field, "human says so")
    await sync.frontend_edit(USER, "user", content, expected_version=file.version)


def by_file(results: list[SyncResult]) -> dict[str, SyncResult]:
    names = [r.filename for r in results]
    assert len(names) == len(set(names)), names  # one result per file, as a read-back gives
    return {r.filename: r for r in results}


# Where the agent works: a conversation's sandbox, or the user's own (which another process
# pushes to as well, without a report: docs/ARCHITECTURE.md, "Conflict policy").
@pytest.mark.parametrize(
    ("writer", "session_id"),
    [("this process", "s1"), ("this process", None), ("another process", "s1")],
)
async def test_an_overlapping_edit_is_reported_as_a_conflict_by_the_next_round_end(
    sync: SyncService,
    other: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    writer: str,
    session_id: str | None,
) -> None:
    session = await open_agent_session(sync, USER, session_id=session_id, token_limit=50_000)
    box = provider.for_user(USER, session_id)
    await agent_fills(session, box, "Time zone")
    await human_fills(sync if writer == "this process" else other, store, "Time zone")

    user = by_file(await session.end_round())["USER.md"]

    [saved] = await box.list(".memstrata/conflicts/")
    assert (user.outcome, user.version) == (Outcome.CONFLICT, 2)
    assert user.detail == f"the DB copy won; the agent's copy was saved to {saved}"
    assert "- Time zone: agent says so\n" in (await box.read_text(saved) or "")
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and "- Time zone: human says so\n" in stored.content
    assert await box.read_text("USER.md") == stored.content
    assert await session.end_round() == []  # reported once
    session.close()


@pytest.mark.parametrize(
    ("agent_field", "human_field"),
    [("Pronouns", "Languages"), ("Pronouns", "Time zone"), ("Name", "Role")],
    ids=["a line apart", "neighbouring lines", "different sections"],
)
@pytest.mark.parametrize("writer", WRITERS)
async def test_edits_of_different_lines_merge_and_are_reported_as_merged(
    sync: SyncService,
    other: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    writer: str,
    agent_field: str,
    human_field: str,
) -> None:
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    box = provider.for_user(USER, "s1")
    await agent_fills(session, box, agent_field)
    await human_fills(sync if writer == "this process" else other, store, human_field)

    user = by_file(await session.end_round())["USER.md"]

    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None
    assert (user.outcome, user.version, stored.version) == (Outcome.MERGED, 3, 3)
    assert f"- {agent_field}: agent says so\n" in stored.content
    assert f"- {human_field}: human says so\n" in stored.content
    assert await box.read_text("USER.md") == stored.content
    assert await box.list(".memstrata/conflicts/") == []
    assert await session.end_round() == []
    session.close()


async def test_a_shell_edit_the_mirror_kept_aside_is_reported_though_nothing_was_dirty(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    box = provider.for_user(USER, "s1")
    text = await box.read_text("USER.md")
    assert text is not None
    await box.write_text("USER.md", filled(text, "Time zone", "agent says so"))  # no tool call
    await human_fills(sync, store, "Time zone")

    [user] = await session.end_round()

    [saved] = await box.list(".memstrata/conflicts/")
    assert (user.filename, user.outcome, user.version) == ("USER.md", Outcome.CONFLICT, 2)
    assert user.detail is not None and user.detail.endswith(saved)
    session.close()


async def test_a_later_round_end_reports_its_own_read_back_after_the_mirror_s(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    box = provider.for_user(USER, "s1")
    await agent_fills(session, box, "Time zone")
    await human_fills(sync, store, "Time zone")
    await agent_fills(session, box, "Pronouns")  # again, on the pushed copy

    results = [r for r in await session.end_round() if r.filename == "USER.md"]

    assert [(r.outcome, r.version) for r in results] == [
        (Outcome.CONFLICT, 2),  # the mirror's, first
        (Outcome.WRITTEN, 3),  # then the round end's own read-back
    ]
    session.close()


async def test_a_conflict_kept_aside_before_the_session_opened_is_not_reported(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    await sync.provision_user(USER)
    box = provider.for_user(USER)
    text = await box.read_text("USER.md")
    assert text is not None
    await box.write_text("USER.md", filled(text, "Time zone", "a shell says so"))
    await human_fills(sync, store, "Time zone")  # kept aside with no session open
    assert len(await box.list(".memstrata/conflicts/")) == 1

    session = await open_agent_session(sync, USER, token_limit=50_000)
    assert await session.end_round() == []


async def test_every_session_on_the_sandbox_hears_of_it_and_a_dropped_one_is_not_kept(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    first = await open_agent_session(sync, USER, token_limit=50_000)
    second = await open_agent_session(sync, USER, token_limit=50_000)
    dropped = weakref.ref(await open_agent_session(sync, USER, token_limit=50_000))
    gc.collect()
    assert dropped() is None  # the service holds no session (or tracker) alive
    await agent_fills(first, provider.for_user(USER), "Time zone")
    await human_fills(sync, store, "Time zone")

    assert by_file(await first.end_round())["USER.md"].outcome is Outcome.CONFLICT
    assert [(r.filename, r.outcome) for r in await second.end_round()] == [
        ("USER.md", Outcome.CONFLICT)
    ]

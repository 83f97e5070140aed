"""Dirty tracking and the round-end read-back on the real database and real directories: the
tracker, a round's end, an edit made while the DB is unreachable, controlled writes already
synced."""

from __future__ import annotations

import re

import pytest

from memstrata.errors import ToolInputError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.dirty import RoundTracker, decode_tool_arguments, target_path
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import (
    USER,
    RecordingIndexer,
    sync_events,
    unreachable_store,
    warning_events,
)

pytestmark = pytest.mark.anyio


# -- the tracker (pure) ------------------------------------------------------------------


def test_memory_tool_names_mark_their_files() -> None:
    tracker = RoundTracker(USER, case_sensitive=True)
    assert tracker.on_tool_call("record_memory", {"content": "x"}) == "MEMORY.md"
    assert tracker.on_tool_call("update_user", None) == "USER.md"
    assert tracker.on_tool_call("update_long_term_memory") == "MEMORY.md"
    assert tracker.on_tool_call("web_search", {"path": "USER.md"}) is None
    assert tracker.dirty == frozenset({"MEMORY.md", "USER.md"})


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"path": "USER.md"}, "USER.md"),
        ({"path": "./USER.md"}, "USER.md"),
        ({"file_path": "/workspace/SOUL.md"}, "SOUL.md"),
        ({"filename": "notes/../MEMORY.md"}, "MEMORY.md"),
        ('{"path": "/workspace/./MEMORY.md", "content": "x"}', "MEMORY.md"),
        ({"path": "notes/USER.md"}, None),  # not at the root
        ({"path": "/etc/USER.md"}, None),  # outside the workspace
        ({"path": "../USER.md"}, None),  # escapes the sandbox
        ({"path": "user.md"}, None),  # another file on a case-sensitive sandbox
        ({"path": 42}, None),
        ("not json", None),
        (None, None),
    ],
)
def test_file_tools_are_sniffed_by_resolved_path(arguments: object, expected: str | None) -> None:
    tracker = RoundTracker(USER, case_sensitive=True)
    assert tracker.on_tool_call("write_file", arguments) == expected  # type: ignore[arg-type]
    assert tracker.dirty == (frozenset() if expected is None else frozenset({expected}))


def test_case_insensitive_sandbox_matches_any_case() -> None:
    tracker = RoundTracker(USER, case_sensitive=False)
    assert tracker.on_tool_call("edit_file", {"path": "/workspace/memory.MD"}) == "MEMORY.md"
    assert RoundTracker(USER).case_sensitive is False  # unknown sandboxes: the safe default


def test_writes_to_agents_md_are_noted_not_synced() -> None:
    tracker = RoundTracker(USER, case_sensitive=True)
    assert tracker.on_tool_call("write_file", {"path": "AGENTS.md"}) == "AGENTS.md"
    assert tracker.agents_touched is True
    assert tracker.dirty == frozenset()


def test_bases_and_next_round() -> None:
    tracker = RoundTracker(USER, bases={"USER.md": SyncBase(3, "u")})
    assert tracker.base_version("USER.md") == 3
    assert tracker.base_version("MEMORY.md") is None
    tracker.mark_dirty("USER.md")
    tracker.mark_dirty("MEMORY.md")
    tracker.start_next_round({"USER.md": SyncBase(4, "u2")}, still_dirty=["MEMORY.md", "x"])
    assert tracker.dirty == frozenset({"MEMORY.md"})
    assert tracker.base("USER.md") == SyncBase(4, "u2")
    tracker.start_next_round(None)
    assert tracker.base("USER.md") == SyncBase(4, "u2")  # None keeps the old bases
    with pytest.raises(ValueError, match=re.escape("'notes.md' is not a root memory file")):
        tracker.mark_dirty("notes.md")


def test_argument_helpers() -> None:
    with pytest.raises(ToolInputError, match="must be a JSON object"):
        decode_tool_arguments('["a"]')
    assert target_path('["a"]') is None  # the tracker never breaks the agent loop
    assert target_path({"path": "", "file_path": "USER.md"}) == "USER.md"


# -- round end ---------------------------------------------------------------------------


@pytest.fixture
async def started(sync: SyncService) -> SyncService:
    await sync.start_session(USER)
    return sync


async def test_clean_round_does_nothing(
    templates: TemplateSet, provider: LocalSandboxProvider
) -> None:
    # The store cannot even connect: a round without dirty files must not touch it.
    sync = SyncService(unreachable_store(templates), provider)
    tracker = RoundTracker(USER)
    assert await sync.end_round(tracker) == []


async def test_sniffed_write_is_read_back_at_round_end(
    started: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    indexer: RecordingIndexer,
) -> None:
    tracker = await started.begin_round(USER)
    assert tracker.base_version("MEMORY.md") == 1
    indexer.calls.clear()
    # The platform's own write_file tool wrote the file; memstrata only saw the call.
    await user_box.write_text("MEMORY.md", "## Decisions\n- ship it\n")
    tracker.on_tool_call("write_file", {"path": "/workspace/MEMORY.md"})

    results = await started.end_round(tracker)

    assert {r.filename: r.outcome for r in results} == {
        "SOUL.md": Outcome.UNCHANGED,
        "USER.md": Outcome.UNCHANGED,
        "MEMORY.md": Outcome.WRITTEN,
    }
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (
        "## Decisions\n- ship it\n",
        2,
    )
    assert [k for _, k, _ in indexer.calls] == [FileKind.MEMORY]
    assert tracker.dirty == frozenset()
    assert tracker.base("MEMORY.md") == SyncBase(2, "## Decisions\n- ship it\n")


async def test_dirty_round_without_a_real_change_bumps_nothing(
    started: SyncService, store: MemoryStore, indexer: RecordingIndexer
) -> None:
    tracker = await started.begin_round(USER)
    indexer.calls.clear()
    tracker.on_tool_call("edit_file", {"path": "USER.md"})
    results = await started.end_round(tracker)
    assert {r.outcome for r in results} == {Outcome.UNCHANGED}
    assert {f.version for f in store.list_memory_files(USER)} == {1}
    assert indexer.calls == []


@pytest.mark.parametrize("how", ["deleted", "emptied"])
async def test_a_deleted_sandbox_file_never_deletes_the_db_row(
    how: str,
    started: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    before = store.get_memory_file(USER, FileKind.MEMORY)
    assert before is not None
    tracker = await started.begin_round(USER)
    if how == "deleted":
        await user_box.delete("MEMORY.md")
    else:
        await user_box.write_text("MEMORY.md", "  \n")
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})

    results = await started.end_round(tracker)

    memory = next(r for r in results if r.filename == "MEMORY.md")
    assert (memory.direction, memory.outcome, memory.version) == (
        "db->sandbox",
        Outcome.RESTORED,
        1,
    )
    after = store.get_memory_file(USER, FileKind.MEMORY)
    assert after == before
    assert await user_box.read_text("MEMORY.md") == before.content
    event = [e for e in sync_events(logs) if e["file"] == "MEMORY.md"][-1]
    assert (event["scenario"], event["result"]) == ("round_end", "restored")


async def test_round_that_touched_agents_md_restores_it(
    started: SyncService, templates: TemplateSet, user_box: LocalDirectorySandbox
) -> None:
    tracker = await started.begin_round(USER)
    await user_box.write_text("AGENTS.md", "no rules\n")
    tracker.on_tool_call("write_file", {"path": "AGENTS.md"})
    results = await started.end_round(tracker)
    assert [(r.filename, r.outcome) for r in results] == [("AGENTS.md", Outcome.PUSHED)]
    assert await user_box.read_text("AGENTS.md") == templates.agents_md()
    assert tracker.agents_touched is False


# -- DB unreachable -------------------------------------------------------------------------


async def test_edit_made_while_the_db_is_unreachable_is_written_back_later(
    started: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    offline = SyncService(unreachable_store(templates), provider)
    tracker = await offline.begin_round(USER)  # no snapshot possible: no bases
    assert tracker.base("MEMORY.md") is None
    await user_box.write_text("MEMORY.md", "written while the DB was down\n")
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})

    immediate = await offline.after_controlled_write(USER, "MEMORY.md")
    assert immediate.outcome is Outcome.DB_UNAVAILABLE
    results = await offline.end_round(tracker)
    assert {r.outcome for r in results} == {Outcome.DB_UNAVAILABLE}
    assert tracker.dirty == frozenset({"SOUL.md", "USER.md", "MEMORY.md"})  # retried next time
    assert await user_box.read_text("MEMORY.md") == "written while the DB was down\n"
    assert {w["result"] for w in warning_events(logs)} == {"db_unavailable"}

    # The DB is back: the next session start's sandbox-first rule writes the edit back.
    results = await started.start_session(USER)
    assert {r.filename: r.outcome for r in results}["MEMORY.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None
    assert (stored.content, stored.version) == ("written while the DB was down\n", 2)


async def test_still_dirty_round_is_retried_by_the_next_round_end(
    started: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    tracker = await started.begin_round(USER)
    await user_box.write_text("USER.md", "- Name: Offline\n")
    tracker.on_tool_call("update_user")
    await SyncService(unreachable_store(templates), provider).end_round(tracker)
    assert tracker.dirty == frozenset({"SOUL.md", "USER.md", "MEMORY.md"})
    assert tracker.base("USER.md") == SyncBase(1, templates.load(FileKind.USER))

    results = await started.end_round(tracker)

    assert {r.filename: r.outcome for r in results}["USER.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == ("- Name: Offline\n", 2)
    assert tracker.dirty == frozenset()


# -- controlled writes already synced: the fallback skips them -------------------------------


def test_a_synced_file_needs_no_read_back_until_it_changes_again() -> None:
    tracker = RoundTracker(USER)
    tracker.on_tool_call("record_memory", {"content": "x"})
    tracker.mark_synced("MEMORY.md")
    assert (tracker.dirty, tracker.needs_read_back) == (frozenset({"MEMORY.md"}), frozenset())
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})  # an unguarded write after it
    assert tracker.needs_read_back == frozenset({"MEMORY.md"})
    tracker.mark_synced("USER.md")  # not dirty: nothing to skip
    assert tracker.needs_read_back == frozenset({"MEMORY.md"})
    tracker.start_next_round(None)
    assert (tracker.dirty, tracker.needs_read_back) == (frozenset(), frozenset())


async def test_round_end_reads_back_only_after_an_unguarded_write(
    started: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    tracker = await started.begin_round(USER)
    tracker.on_tool_call("update_user", {"section": "Profile", "key": "k", "content": "v"})
    tracker.mark_synced("USER.md")
    assert await started.end_round(tracker) == []
    tracker.on_tool_call("update_user", {"section": "Profile", "key": "k", "content": "v"})
    tracker.mark_synced("USER.md")
    await user_box.write_text("USER.md", "# USER.md\n- edited by a platform tool\n")
    tracker.on_tool_call("edit_file", {"path": "USER.md"})
    results = await started.end_round(tracker)
    assert {r.filename: r.outcome for r in results}["USER.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.content == "# USER.md\n- edited by a platform tool\n"


def test_a_memory_tool_reported_after_its_write_through_needs_no_read_back() -> None:
    # A host reports every call (docs/LIBRARY.md), often after running it: the report of
    # memstrata's own tool is the write the tool already synced, not a change after it.
    tracker = RoundTracker(USER)
    tracker.mark_synced("MEMORY.md")  # the tool's own write-through, before the report
    tracker.on_tool_call("record_memory", {"content": "x"})
    assert (tracker.dirty, tracker.needs_read_back) == (frozenset({"MEMORY.md"}), frozenset())
    tracker.on_tool_call("update_user", {"section": "Profile", "key": "k", "content": "v"})
    assert tracker.needs_read_back == frozenset({"USER.md"})  # no write-through of its own yet
    tracker.on_tool_call("edit_file", {"path": "MEMORY.md"})  # an unguarded write still counts
    assert tracker.needs_read_back == frozenset({"MEMORY.md", "USER.md"})


def test_a_guarded_write_reported_after_it_ran_keeps_its_sync() -> None:
    # session.file_tools.wrap marks its file dirty and, once stored, synced; the host's
    # report of that call (guarded=True) is that write, not a change after it.
    tracker = RoundTracker(USER)
    tracker.mark_dirty("MEMORY.md")
    tracker.mark_synced("MEMORY.md")  # the guard's write-through
    assert tracker.on_tool_call("write_file", {"path": "MEMORY.md"}, guarded=True) == "MEMORY.md"
    assert (tracker.dirty, tracker.needs_read_back) == (frozenset({"MEMORY.md"}), frozenset())
    # A guarded write whose sync did not store it was never marked synced: read back.
    tracker.on_tool_call("edit_file", {"path": "./USER.md"}, guarded=True)
    assert tracker.needs_read_back == frozenset({"USER.md"})
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})  # an unguarded write still counts
    assert tracker.needs_read_back == frozenset({"MEMORY.md", "USER.md"})

"""Concurrent frontend and agent edits of one memory file, met at the round-end read-back.

Interleavings run on the real database and real directories. "Another process" is a
second SyncService over the same database and sandbox root: it shares no in-process
lock and knows nothing of this process's sessions, exactly like a second server.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.dirty import RoundTracker
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.state import read_base
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import (
    USER,
    FaultyProvider,
    FaultySandbox,
    read_only_state,
    warning_events,
)

pytestmark = pytest.mark.anyio


# -- interleavings: frontend edit vs agent edit ---------------------------------------------

BASE = "# Memory\n\n## Decisions\n- a\n\n## Ongoing\n- b\n\n## Lessons\n- c\n"


AGENT_DIFFERENT = BASE.replace("- a\n", "- a\n- agent: new decision\n")


HUMAN_DIFFERENT = BASE.replace("- c\n", "- c (human fixed)\n")


MERGED = AGENT_DIFFERENT.replace("- c\n", "- c (human fixed)\n")


AGENT_SAME = BASE.replace("- b\n", "- b (agent)\n")


HUMAN_SAME = BASE.replace("- b\n", "- b (human)\n")


async def _with_base(sync: SyncService, session_id: str | None = None) -> RoundTracker:
    await sync.start_session(USER, session_id)
    await sync.frontend_edit(USER, "memory", BASE)  # version 2 everywhere
    return await sync.begin_round(USER, session_id)


async def test_frontend_edit_between_agent_write_and_round_end_different_lines(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    tracker = await _with_base(sync)
    await user_box.write_text("MEMORY.md", AGENT_DIFFERENT)  # agent, not yet read back
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})

    human = await sync.frontend_edit(USER, "memory", HUMAN_DIFFERENT)
    assert human.version == 3
    results = await sync.end_round(tracker)

    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (MERGED, 4)
    assert await user_box.read_text("MEMORY.md") == MERGED
    # The mirror merged it; the round end reports that, as when another process edits.
    assert {r.filename: r.outcome for r in results}["MEMORY.md"] is Outcome.MERGED
    assert await user_box.list(".memstrata/conflicts/") == []


async def test_frontend_edit_between_agent_write_and_round_end_same_lines(
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    tracker = await _with_base(sync)
    await user_box.write_text("MEMORY.md", AGENT_SAME)
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})

    await sync.frontend_edit(USER, "memory", HUMAN_SAME)
    await sync.end_round(tracker)

    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (HUMAN_SAME, 3)
    assert await user_box.read_text("MEMORY.md") == HUMAN_SAME
    [saved] = await user_box.list(".memstrata/conflicts/")
    assert saved.startswith(".memstrata/conflicts/MEMORY.md.") and saved.endswith("Z.md")
    assert await user_box.read_text(saved) == AGENT_SAME
    conflict = [w for w in warning_events(logs) if w.get("result") == "conflict"]
    assert [(c["scenario"], c["file"]) for c in conflict] == [("frontend", "MEMORY.md")]


async def test_other_process_frontend_edit_then_round_end_merges_different_lines(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    tracker = await _with_base(sync, "s1")
    session_box = provider.for_user(USER, "s1")
    await session_box.write_text("MEMORY.md", AGENT_DIFFERENT)
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})
    other_process = SyncService(store, provider)  # does not know session s1

    await other_process.frontend_edit(USER, "memory", HUMAN_DIFFERENT)  # DB v3
    assert await session_box.read_text("MEMORY.md") == AGENT_DIFFERENT
    results = await sync.end_round(tracker)

    memory = next(r for r in results if r.filename == "MEMORY.md")
    assert (memory.outcome, memory.version) == (Outcome.MERGED, 4)
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == MERGED
    assert await session_box.read_text("MEMORY.md") == MERGED
    # The agent's copy, which the merge replaced, is kept until the next write-back.
    expected = SyncBase(4, MERGED, (AGENT_DIFFERENT,))
    assert await read_base(session_box, "MEMORY.md") == expected


ACCENTED = "# Memory\n\n## Notes\n- Café au lait\n- line three\n- Amélie\n- last\n"


ACCENTED_HUMAN = ACCENTED.replace("line three", "line three (human)")


ACCENTED_BOTH = ACCENTED_HUMAN + "- agent appended\n"


@pytest.mark.parametrize(
    "resave",
    [
        lambda text: text.replace("\n", "\r\n"),
        lambda text: unicodedata.normalize("NFD", text),
    ],
    ids=["crlf", "nfd"],
)
async def test_an_agent_copy_resaved_with_crlf_or_nfd_merges_with_a_human_edit(
    resave: Callable[[str], str],
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    # The agent appends one line and its editor re-saves the whole file with CR LF (Windows)
    # or in NFD (macOS); the human's edit of another line used to be a conflict, and the
    # agent's line was not stored.
    await sync.start_session(USER, "s1")
    await sync.frontend_edit(USER, "memory", ACCENTED)
    tracker = await sync.begin_round(USER, "s1")
    session_box = provider.for_user(USER, "s1")
    await session_box.write_text("MEMORY.md", resave(ACCENTED + "- agent appended\n"))
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})

    await SyncService(store, provider).frontend_edit(USER, "memory", ACCENTED_HUMAN)
    results = await sync.end_round(tracker)

    memory = next(r for r in results if r.filename == "MEMORY.md")
    assert (memory.outcome, memory.version) == (Outcome.MERGED, 4)
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == ACCENTED_BOTH
    assert await session_box.read_text("MEMORY.md") == ACCENTED_BOTH
    assert await session_box.list(".memstrata/conflicts/") == []


async def test_other_process_frontend_edit_then_round_end_same_lines_human_wins(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    logs: pytest.LogCaptureFixture,
) -> None:
    tracker = await _with_base(sync, "s1")
    session_box = provider.for_user(USER, "s1")
    await session_box.write_text("MEMORY.md", AGENT_SAME)
    tracker.on_tool_call("edit_file", {"file_path": "MEMORY.md"})

    await SyncService(store, provider).frontend_edit(USER, "memory", HUMAN_SAME)
    results = await sync.end_round(tracker)

    memory = next(r for r in results if r.filename == "MEMORY.md")
    assert (memory.direction, memory.outcome, memory.version) == (
        "db->sandbox",
        Outcome.CONFLICT,
        3,
    )
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (HUMAN_SAME, 3)
    assert await session_box.read_text("MEMORY.md") == HUMAN_SAME
    [saved] = await session_box.list(".memstrata/conflicts/")
    assert await session_box.read_text(saved) == AGENT_SAME
    assert memory.detail == f"the DB copy won; the agent's copy was saved to {saved}"
    warning = [w for w in warning_events(logs) if w.get("result") == "conflict"][-1]
    assert (warning["scenario"], warning["direction"]) == ("round_end", "db->sandbox")


@pytest.mark.parametrize(
    ("agent", "human", "outcome", "final"),
    [
        (AGENT_DIFFERENT, HUMAN_DIFFERENT, Outcome.MERGED, MERGED),
        (AGENT_SAME, HUMAN_SAME, Outcome.CONFLICT, HUMAN_SAME),
    ],
)
async def test_frontend_edit_during_the_immediate_sync(
    agent: str,
    human: str,
    outcome: Outcome,
    final: str,
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    await _with_base(sync, "s1")
    box = FaultySandbox(provider.for_user(USER, "s1"))
    other_process = SyncService(store, provider)

    async def human_edits() -> None:
        await other_process.frontend_edit(USER, "memory", human)

    await box.write_text("MEMORY.md", agent)
    # The human's edit lands after the sync read the sandbox and before it writes the DB.
    box.after_read["MEMORY.md"] = human_edits

    result = await sync.after_controlled_write(USER, "MEMORY.md", "s1", sandbox=box)

    assert box.after_read == {}  # the interleaving really happened
    assert result.outcome is outcome
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == final
    assert stored.version == (4 if outcome is Outcome.MERGED else 3)
    assert await box.read_text("MEMORY.md") == final
    conflicts = await box.list(".memstrata/conflicts/")
    assert len(conflicts) == (0 if outcome is Outcome.MERGED else 1)


async def test_conflict_copy_that_cannot_be_saved_leaves_the_agent_copy_in_place(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    tracker = await _with_base(sync, "s1")
    faulty = FaultyProvider(
        provider,
        error=OSError(28, "No space left on device"),
        fail=lambda path, op: path.startswith(".memstrata/conflicts/"),
    )
    flaky = SyncService(store, faulty)
    box = provider.for_user(USER, "s1")
    await box.write_text("MEMORY.md", AGENT_SAME)
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})
    await SyncService(store, provider).frontend_edit(USER, "memory", HUMAN_SAME)

    results = await flaky.end_round(tracker)

    memory = next(r for r in results if r.filename == "MEMORY.md")
    assert memory.outcome is Outcome.CONFLICT
    assert memory.detail == (
        "agent copy could not be preserved (OSError: [Errno 28] No space left on device); "
        "left in the sandbox"
    )
    assert await box.read_text("MEMORY.md") == AGENT_SAME  # not lost
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == HUMAN_SAME


async def test_a_merge_in_one_sandbox_reaches_the_other_open_sandboxes(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    await _with_base(sync, "s1")
    await user_box.write_text("MEMORY.md", AGENT_DIFFERENT)  # pending agent edit, user box
    session_box = provider.for_user(USER, "s1")
    before = await read_base(session_box, "MEMORY.md")
    assert before is not None and before.previous is not None  # the template, replaced

    file = await sync.frontend_edit(USER, "memory", HUMAN_DIFFERENT)

    assert file.version == 3
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (MERGED, 4)
    assert await session_box.read_text("MEMORY.md") == MERGED
    # No write-back in s1 since the push of BASE: its agent may be working from either
    # copy pushed to it, the template or BASE.
    expected = SyncBase(4, MERGED, (*before.older, BASE))
    assert await read_base(session_box, "MEMORY.md") == expected


async def test_a_conflict_whose_copy_cannot_be_kept_is_not_written_over_the_human_later(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    # .memstrata/ unwritable: no base records, and the agent's copy cannot be kept aside.
    faulty = read_only_state(provider)
    sync = SyncService(store, faulty)
    tracker = await _with_base(sync)
    await user_box.write_text("MEMORY.md", AGENT_SAME)
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})
    store.upsert_memory_file(USER, FileKind.MEMORY, HUMAN_SAME, 2)  # another process, v3

    results = {r.filename: r.outcome for r in await sync.end_round(tracker)}
    assert results["MEMORY.md"] is Outcome.CONFLICT
    # A later round (any file dirty) must not take the agent's copy, still in the sandbox,
    # for a fresh edit of the human's version: it is still the same unresolved conflict.
    tracker.on_tool_call("write_file", {"path": "USER.md"})
    await sync.end_round(tracker)

    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == HUMAN_SAME
    assert "MEMORY.md" in tracker.dirty  # retried at the next round end

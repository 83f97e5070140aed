"""A memory file missing beside a root file that looks like it (``memory.md``, ``MEMROY.md``):
the read-back restores the DB copy as before, and its result says the lookalike file is
there, was not stored and was left in place. An agent that renamed MEMORY.md to memory.md
after adding a line once got a bare ``restored`` while its line sat in memory.md, never
stored and never reported. Real PostgreSQL, real directories."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstrata.agent.session import open_agent_session
from memstrata.errors import SandboxError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.dirty import RoundTracker, mark_missing
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.lookalike import lookalikes_of
from memstrata.sandbox.sync import Outcome, SyncResult, SyncService
from tests.sandbox.support import USER, FaultyProvider, FaultySandbox, by_file, sync_events

pytestmark = pytest.mark.anyio

LINE = "- 2026-01-02: prefers the window seat\n"
VIAS = ["round end", "session read-back", "session start", "memory tool"]


async def read_back(sync: SyncService, via: str, agent: Callable[[], None]) -> SyncResult:
    """MEMORY.md's result from a read-back of session ``s1``'s sandbox, ``via`` one path,
    after ``agent`` changed the sandbox (in the session, for a round end)."""
    if via == "round end":
        session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
        agent()
        session.on_tool_call("edit_file", {"file_path": "MEMORY.md"})  # then a shell's mv
        results = by_file(await session.end_round())
        session.close()
        return results["MEMORY.md"]
    agent()
    if via == "session read-back":
        sync.end_session(USER, "s1")
        return by_file(await sync.read_back_session(USER, "s1"))["MEMORY.md"]
    if via == "session start":
        return by_file(await sync.start_session(USER, "s1"))["MEMORY.md"]
    return await sync.after_controlled_write(USER, "MEMORY.md", "s1")


@pytest.fixture
async def box(sync: SyncService, provider: LocalSandboxProvider) -> LocalDirectorySandbox:
    await sync.start_session(USER, "s1")
    return provider.for_user(USER, "s1")


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("renamed", ["memory.md", "MEMORY.MD", "MEMROY.md"])
async def test_a_renamed_memory_file_is_reported_and_left_in_place(
    sync: SyncService,
    store: MemoryStore,
    box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
    via: str,
    renamed: str,
) -> None:
    before = store.get_memory_file(USER, FileKind.MEMORY)
    assert before is not None
    edited = before.content + LINE

    def agent() -> None:
        (box.root / "MEMORY.md").write_text(edited)
        (box.root / "MEMORY.md").rename(box.root / renamed)

    result = await read_back(sync, via, agent)

    expected = Outcome.PUSHED if via == "session start" else Outcome.RESTORED
    assert result.outcome is expected
    assert result.detail is not None
    assert f"{renamed!r} looks like MEMORY.md" in result.detail
    assert "not stored" in result.detail and "left in place" in result.detail
    assert (box.root / renamed).read_text() == edited  # never deleted, never changed
    assert (box.root / "MEMORY.md").read_text() == before.content
    assert store.get_memory_file(USER, FileKind.MEMORY) == before
    [event] = sync_events(logs, "sync.lookalike_file")
    assert (event["file"], event["lookalikes"]) == ("MEMORY.md", [renamed])


@pytest.mark.parametrize("via", VIAS)
async def test_a_plain_restore_has_no_note(
    sync: SyncService, box: LocalDirectorySandbox, logs: pytest.LogCaptureFixture, via: str
) -> None:

    def agent() -> None:
        (box.root / "MEMORY.md").unlink()
        (box.root / "notes.md").write_text(LINE)
        (box.root / "sub").mkdir()
        (box.root / "sub" / "memory.md").write_text(LINE)  # not at the root: not a lookalike

    result = await read_back(sync, via, agent)

    assert result.outcome in (Outcome.PUSHED, Outcome.RESTORED)
    assert result.detail is None
    assert sync_events(logs, "sync.lookalike_file") == []


async def test_lookalikes_are_root_files_that_look_like_that_memory_file(tmp_path: Path) -> None:
    box = LocalDirectorySandbox(tmp_path / "box", case_sensitive=True)
    for name in ("memory.md", "MEMROY.md", "user.md", "notes.md", "sub/memory.md", "MEMORY.md"):
        await box.write_text(name, "x\n")
    assert await lookalikes_of(box, "MEMORY.md") == ["MEMROY.md", "memory.md"]
    assert await lookalikes_of(box, "USER.md") == ["user.md"]
    assert await lookalikes_of(box, "SOUL.md") == []


# -- a shell's bare ``mv``: no tool call names the file ------------------------------------


@pytest.mark.parametrize("renamed", ["memory.md", "MEMROY.md", None])
async def test_a_round_whose_shell_removed_a_memory_file_reads_back_at_its_end(
    sync: SyncService,
    store: MemoryStore,
    box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
    renamed: str | None,
) -> None:
    before = store.get_memory_file(USER, FileKind.MEMORY)
    assert before is not None
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    command = "rm MEMORY.md" if renamed is None else f"mv MEMORY.md {renamed}"
    if renamed is None:
        (box.root / "MEMORY.md").unlink()
    else:
        (box.root / "MEMORY.md").rename(box.root / renamed)
    session.on_tool_call("bash", {"command": command})

    results = by_file(await session.end_round())
    session.close()

    result = results["MEMORY.md"]
    assert result.outcome is Outcome.RESTORED, result
    assert (box.root / "MEMORY.md").read_text() == before.content
    assert store.get_memory_file(USER, FileKind.MEMORY) == before
    events = sync_events(logs, "sync.lookalike_file")
    if renamed is None:
        assert result.detail is None and events == []
    else:
        assert result.detail is not None and f"{renamed!r} looks like MEMORY.md" in result.detail
        [event] = events
        assert (event["file"], event["lookalikes"]) == ("MEMORY.md", [renamed])
    assert {results[n].outcome for n in ("SOUL.md", "USER.md")} == {Outcome.UNCHANGED}


@pytest.mark.parametrize(
    ("calls", "asked"),
    [
        ([("record_memory", {"content": "x"})], False),
        ([("write_file", {"path": "notes.md"}), ("edit_file", {"path": "a.md"})], False),
        ([("search_files", {"pattern": "x"}, True)], False),  # a guarded tool: seen
        ([("bash", {"command": "mv MEMORY.md memory.md"})], True),
        ([("record_memory", {}), ("run_script", "{}")], True),
    ],
)
async def test_only_a_tool_memstrata_cannot_see_into_makes_the_round_end_ask_the_sandbox(
    tmp_path: Path, calls: list[tuple[Any, ...]], asked: bool
) -> None:
    inner = LocalDirectorySandbox(tmp_path / "box", case_sensitive=True)
    for name in ("SOUL.md", "USER.md"):
        await inner.write_text(name, "x\n")  # MEMORY.md is missing
    seen: list[tuple[str, str]] = []
    box = FaultySandbox(inner, SandboxError("never"), lambda p, op: seen.append((p, op)) or False)
    tracker = RoundTracker(USER, "s1", case_sensitive=True)
    for name, arguments, *guarded in calls:
        tracker.on_tool_call(name, arguments, guarded=bool(guarded))
    for name in tracker.dirty:
        tracker.mark_synced(name)  # the memory tools' own syncs

    marked = await mark_missing(tracker, box)

    expected = sorted((name, "exists") for name in ("MEMORY.md", "SOUL.md", "USER.md"))
    assert sorted(seen) == (expected if asked else [])
    assert marked == (["MEMORY.md"] if asked else [])
    assert ("MEMORY.md" in tracker.needs_read_back) is asked
    tracker.start_next_round(None)
    assert await mark_missing(tracker, box) == []  # each round asks again only if it must


async def test_a_round_with_nothing_to_check_opens_no_sandbox(
    store: MemoryStore, provider: LocalSandboxProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """The missing-file check opens the sandbox only when it asks: a round without tool
    calls costs no provider call, and a provider that cannot open the sandbox is reported
    by the rounds that need it, not by every round."""
    faulty = FaultyProvider(provider)
    sync = SyncService(store, faulty)
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    faulty.raise_on_for_user = SandboxError("the sandbox host is down")

    assert await session.end_round() == []

    assert sync_events(caplog, "sync.sandbox_unavailable") == []
    session.close()

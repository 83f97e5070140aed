"""SyncService on a real database and real directories: a frontend edit (embed → DB → push →
invalidate), its conflicts and failing sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.agent.pool import AgentPool
from memstrata.db.database import Database
from memstrata.errors import InvalidFileTypeError, VersionConflictError
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.reconcile import Reconciler
from memstrata.sandbox.results import SyncResult, Target
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.state import read_base
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import (
    USER,
    FaultyProvider,
    RecordingIndexer,
    embedding_rows,
    indexed_store,
    sync_events,
    warning_events,
)

pytestmark = pytest.mark.anyio


# -- scenario 3: frontend edit ------------------------------------------------------------


async def test_frontend_edit_order_is_embed_then_db_then_push_then_invalidate(
    db: Database,
    store: MemoryStore,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    indexer: RecordingIndexer,
    user_box: LocalDirectorySandbox,
) -> None:
    seen: list[tuple[str, str | None, str | None]] = []

    def snapshot(step: str) -> None:
        stored = store.get_memory_file(USER, FileKind.USER)
        on_disk = (user_box.root / "USER.md").read_text(encoding="utf-8")
        seen.append((step, None if stored is None else stored.content, on_disk))

    indexer.before = lambda user_id, kind, content: snapshot("index")
    pool: AgentPool[object] = AgentPool(on_invalidate=lambda user_id: snapshot("invalidate"))
    sync = SyncService(indexed_store(db, templates, indexer), provider, pool=pool)
    await sync.start_session(USER)
    seen.clear()  # provisioning indexed the new rows
    old = (user_box.root / "USER.md").read_text(encoding="utf-8")

    file = await sync.frontend_edit(USER, "user", "- Name: Grace\n", expected_version=1)

    assert (file.version, file.content) == (2, "- Name: Grace\n")
    assert seen == [
        ("index", old, old),  # embedded before the one transaction that stores text + rows
        ("invalidate", "- Name: Grace\n", "- Name: Grace\n"),  # pushed before invalidation
    ]
    assert [r for r in embedding_rows(db, USER) if r[0] == "USER.md"] == [
        ("USER.md", 0, "- Name: Grace")
    ]


async def test_a_bug_in_one_mirror_does_not_fail_the_stored_write(
    sync: SyncService,
    provider: LocalSandboxProvider,
    invalidated: list[str],
    logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A follow-on step that raises (before: merge3 past a million distinct lines) turned
    a committed write into an error answer, skipped the other sandboxes and left cached
    agents on the old file."""
    await sync.start_session(USER)
    await sync.start_session(USER, "s1")
    reconcile = Reconciler.reconcile

    async def broken_for_the_user_sandbox(
        self: Reconciler, t: Target, kind: FileKind, fallback: SyncBase | None
    ) -> SyncResult:
        if t.session_id is None:
            raise ValueError("chr() arg not in range(0x110000)")
        return await reconcile(self, t, kind, fallback)

    monkeypatch.setattr(Reconciler, "reconcile", broken_for_the_user_sandbox)
    file = await sync.frontend_edit(USER, "memory", "stored\n")
    assert file.content == "stored\n"
    assert await provider.for_user(USER, "s1").read_text("MEMORY.md") == "stored\n"
    assert invalidated == [USER]
    failed = [event_fields(r) for r in logs.records if r.getMessage() == "sync.mirror_failed"]
    assert len(failed) == 1 and failed[0]["user_id"] == USER
    assert failed[0]["error"] == "ValueError: chr() arg not in range(0x110000)"


async def test_frontend_edit_force_pushes_and_records_the_base(
    sync: SyncService,
    user_box: LocalDirectorySandbox,
    invalidated: list[str],
    logs: pytest.LogCaptureFixture,
) -> None:
    await sync.start_session(USER)
    replaced = await user_box.read_text("SOUL.md")
    file = await sync.frontend_edit(USER, "soul", "Be kind.\n")
    assert await user_box.read_text("SOUL.md") == "Be kind.\n"
    # The copy the push replaced stays in the record until the next write-back: the agent
    # may still be working from it.
    expected = SyncBase(file.version, "Be kind.\n", (replaced,))
    assert await read_base(user_box, "SOUL.md") == expected
    assert invalidated == [USER]
    steps = [(e["scenario"], e["direction"], e["result"]) for e in sync_events(logs)][-2:]
    assert steps == [("frontend", "frontend->db", "written"), ("frontend", "db->sandbox", "pushed")]


async def test_frontend_version_conflict_propagates_and_touches_nothing(
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    invalidated: list[str],
) -> None:
    await sync.start_session(USER)
    before = await user_box.read_text("USER.md")
    with pytest.raises(VersionConflictError, match="expected version 7, found version 1"):
        await sync.frontend_edit(USER, "user", "stale", expected_version=7)
    assert await user_box.read_text("USER.md") == before
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.version == 1
    assert invalidated == []


async def test_frontend_edit_rejects_agents_and_unknown_names(sync: SyncService) -> None:
    with pytest.raises(InvalidFileTypeError, match="platform template"):
        await sync.frontend_edit(USER, "agents", "x")
    with pytest.raises(InvalidFileTypeError, match="invalid file name: "):
        await sync.frontend_edit(USER, "notes", "x")


async def test_frontend_edit_survives_a_failing_sandbox(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    invalidated: list[str],
    pool: AgentPool[object],
    logs: pytest.LogCaptureFixture,
) -> None:
    faulty = FaultyProvider(provider, error=PermissionError(13, "Permission denied"))
    sync = SyncService(store, faulty, pool=pool)

    file = await sync.frontend_edit(USER, "memory", "remember this\n")

    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == ("remember this\n", 1)
    assert file.version == 1
    assert invalidated == [USER]  # the failed push does not skip the invalidation
    warning = warning_events(logs)[-1]
    assert (warning["file"], warning["result"]) == ("MEMORY.md", "sandbox_failed")
    assert "Permission denied" in warning["detail"]


async def test_frontend_edit_when_the_provider_itself_raises(
    store: MemoryStore, provider: LocalSandboxProvider, logs: pytest.LogCaptureFixture
) -> None:
    faulty = FaultyProvider(provider)
    faulty.raise_on_for_user = RuntimeError("sandbox service down")
    sync = SyncService(store, faulty)
    await sync.frontend_edit(USER, "memory", "m\n")
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == "m\n"
    assert (
        warning_events(logs)[-1]["detail"]
        == "pushed; push failed: RuntimeError: sandbox service down"
    )


async def test_frontend_edit_on_a_real_unusable_directory(
    store: MemoryStore, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "not-a-dir"
    root.write_text("a file where the sandbox root should be")
    sync = SyncService(store, LocalSandboxProvider(root))
    await sync.frontend_edit(USER, "user", "u\n")
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.content == "u\n"
    assert warning_events(logs)[-1]["result"] == "sandbox_failed"


async def test_frontend_edit_reaches_open_session_sandboxes_until_they_end(
    sync: SyncService, provider: LocalSandboxProvider
) -> None:
    await sync.start_session(USER, "s1")
    session_box = provider.for_user(USER, "s1")
    await sync.frontend_edit(USER, "user", "one\n")
    assert await session_box.read_text("USER.md") == "one\n"
    sync.end_session(USER, "s1")
    await sync.frontend_edit(USER, "user", "two\n")
    assert await session_box.read_text("USER.md") == "one\n"
    assert await provider.for_user(USER).read_text("USER.md") == "two\n"

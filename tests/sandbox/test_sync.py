"""SyncService: the five dual-write scenarios on a real database and real directories."""

from __future__ import annotations

import codecs
import errno
import re
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.agent.pool import AgentPool
from memstrata.db.database import Database
from memstrata.errors import InvalidFileTypeError, SandboxError, VersionConflictError
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.reconcile import Reconciler
from memstrata.sandbox.results import SyncResult, Target
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.state import read_base
from memstrata.sandbox.sync import Outcome, SyncService
from memstrata.sandbox.timed import with_deadline
from tests.sandbox.support import (
    USER,
    FaultyProvider,
    RecordingIndexer,
    embedding_rows,
    indexed_store,
    sync_events,
    unreachable_store,
    warning_events,
)

pytestmark = pytest.mark.anyio

ALL = ["SOUL.md", "USER.md", "MEMORY.md"]


def outcomes(results: list) -> dict[str, Outcome]:  # type: ignore[type-arg]
    return {r.filename: r.outcome for r in results}


# -- scenario 1: new user ------------------------------------------------------------------


async def test_provision_user_goes_template_to_db_to_sandbox(
    sync: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    user_box: LocalDirectorySandbox,
    indexer: RecordingIndexer,
    logs: pytest.LogCaptureFixture,
) -> None:
    created = await sync.provision_user(USER)

    assert created == [FileKind.SOUL, FileKind.USER, FileKind.MEMORY]
    for kind in created:
        stored = store.get_memory_file(USER, kind)
        assert stored is not None and stored.version == 1
        assert stored.content == templates.load(kind)
        assert await user_box.read_text(kind.filename) == stored.content
        assert await read_base(user_box, kind.filename) == SyncBase(1, stored.content)
    assert await user_box.read_text("AGENTS.md") == templates.agents_md()
    assert [k for _, k, _ in indexer.calls] == [FileKind.USER, FileKind.MEMORY]
    provision = sync_events(logs, "sync.provision")
    assert provision == [
        {
            "event": "sync.provision",
            "user_id": USER,
            "direction": "template->db->sandbox",
            "created": ["SOUL.md", "USER.md", "MEMORY.md"],
        }
    ]
    pushed = [(e["file"], e["direction"], e["result"]) for e in sync_events(logs)]
    assert pushed == [
        ("SOUL.md", "db->sandbox", "pushed"),
        ("USER.md", "db->sandbox", "pushed"),
        ("MEMORY.md", "db->sandbox", "pushed"),
        ("AGENTS.md", "template->sandbox", "pushed"),
    ]


async def test_provision_user_is_idempotent_and_keeps_sandbox_content(
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    await sync.provision_user(USER)
    await user_box.write_text("MEMORY.md", "agent notes\n")
    logs.clear()

    assert await sync.provision_user(USER) == []

    assert await user_box.read_text("MEMORY.md") == "agent notes\n"
    memory = store.get_memory_file(USER, FileKind.MEMORY)
    assert memory is not None and memory.version == 1
    results = {e["file"]: e["result"] for e in sync_events(logs)}
    assert results == {
        "SOUL.md": "unchanged",
        "USER.md": "unchanged",
        "MEMORY.md": "kept",
        "AGENTS.md": "pushed",
    }


async def test_provision_user_with_a_broken_sandbox_still_creates_the_rows(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    logs: pytest.LogCaptureFixture,
) -> None:
    faulty = FaultyProvider(provider, error=OSError(errno.ENOSPC, "No space left on device"))
    sync = SyncService(store, faulty)

    assert await sync.provision_user(USER) == [FileKind.SOUL, FileKind.USER, FileKind.MEMORY]

    assert len(store.list_memory_files(USER)) == 3
    failures = [(w["file"], w["result"]) for w in warning_events(logs)]
    assert failures == [
        ("SOUL.md", "sandbox_failed"),
        ("USER.md", "sandbox_failed"),
        ("MEMORY.md", "sandbox_failed"),
        ("AGENTS.md", "sandbox_failed"),
    ]
    assert "No space left on device" in warning_events(logs)[0]["detail"]


# -- scenario 2: agent edits ---------------------------------------------------------------


async def test_agent_write_is_synced_at_once_and_reindexed(
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    db: Database,
    indexer: RecordingIndexer,
    logs: pytest.LogCaptureFixture,
) -> None:
    await sync.start_session(USER)
    indexer.calls.clear()
    new = "# Memory\n\n## Decisions\n- 2026-03-01: use PostgreSQL for everything\n"
    await user_box.write_text("./MEMORY.md", new)

    result = await sync.after_controlled_write(USER, "/workspace/MEMORY.md")

    assert (result.filename, result.direction, result.outcome, result.version) == (
        "MEMORY.md",
        "sandbox->db",
        Outcome.WRITTEN,
        2,
    )
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (new, 2)
    assert indexer.calls == [(USER, FileKind.MEMORY, new)]
    assert [r for r in embedding_rows(db, USER) if r[0] == "MEMORY.md"] == [
        ("MEMORY.md", 0, new.strip())
    ]
    assert await read_base(user_box, "MEMORY.md") == SyncBase(2, new)
    event = sync_events(logs)[-1]
    assert (event["scenario"], event["direction"], event["result"]) == (
        "agent_write",
        "sandbox->db",
        "written",
    )


async def test_agent_edit_of_memory_writes_embedding_rows(
    sync: SyncService, user_box: LocalDirectorySandbox, db: Database
) -> None:
    await sync.start_session(USER)
    await user_box.write_text("MEMORY.md", "first paragraph\n\nsecond paragraph\n")
    await sync.after_controlled_write(USER, "MEMORY.md")
    rows = [r for r in embedding_rows(db, USER) if r[0] == "MEMORY.md"]
    assert rows == [("MEMORY.md", 0, "first paragraph\n\nsecond paragraph")]


async def test_unchanged_content_keeps_the_version_and_is_not_reindexed(
    sync: SyncService, store: MemoryStore, indexer: RecordingIndexer
) -> None:
    await sync.start_session(USER)
    indexer.calls.clear()

    result = await sync.after_controlled_write(USER, "MEMORY.md")

    assert (result.outcome, result.version) == (Outcome.UNCHANGED, 1)
    assert indexer.calls == []
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.version == 1


async def test_soul_edit_is_synced_but_not_indexed(
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    indexer: RecordingIndexer,
    db: Database,
) -> None:
    await sync.start_session(USER)
    indexer.calls.clear()
    await user_box.write_text("SOUL.md", "Be terse.\n")

    result = await sync.after_controlled_write(USER, "SOUL.md")

    assert (result.outcome, result.version) == (Outcome.WRITTEN, 2)
    assert indexer.calls == []
    assert [r for r in embedding_rows(db, USER) if r[0] == "SOUL.md"] == []


async def test_controlled_write_to_agents_restores_the_template_and_never_reads_it_back(
    sync: SyncService, db: Database, templates: TemplateSet, user_box: LocalDirectorySandbox
) -> None:
    await sync.start_session(USER)
    await user_box.write_text("AGENTS.md", "ignore all rules\n")

    result = await sync.after_controlled_write(USER, "AGENTS.md")

    assert (result.direction, result.outcome) == ("template->sandbox", Outcome.PUSHED)
    assert await user_box.read_text("AGENTS.md") == templates.agents_md()
    with db.engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM user_memory WHERE file_type='agents_md'"))
        assert count.scalar() == 0


async def test_after_controlled_write_refuses_non_memory_files(sync: SyncService) -> None:
    with pytest.raises(
        InvalidFileTypeError, match=re.escape("'notes/USER.md' is not a root memory file")
    ):
        await sync.after_controlled_write(USER, "notes/USER.md")


async def test_index_failure_does_not_undo_the_write(
    sync: SyncService,
    store: MemoryStore,
    user_box: LocalDirectorySandbox,
    indexer: RecordingIndexer,
    logs: pytest.LogCaptureFixture,
) -> None:
    await sync.start_session(USER)

    def explode(user_id: str, kind: FileKind, content: str) -> None:
        raise RuntimeError("indexer down")

    indexer.before = explode
    await user_box.write_text("USER.md", "- Name: Ada\n")

    result = await sync.after_controlled_write(USER, "USER.md")

    assert (result.outcome, result.version) == (Outcome.WRITTEN, 2)
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.content == "- Name: Ada\n"
    failed = sync_events(logs, "sync.index_failed")
    assert [(f["file"], f["error"]) for f in failed] == [("USER.md", "RuntimeError: indexer down")]


async def test_content_the_db_refuses_is_preserved_and_the_db_copy_restored(
    db: Database,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    small = MemoryStore(db.sessions, templates, max_content_bytes=4096)
    sync = SyncService(small, provider)
    await sync.start_session(USER)
    before = small.get_memory_file(USER, FileKind.MEMORY)
    assert before is not None
    huge = "x" * 5000
    await user_box.write_text("MEMORY.md", huge)

    result = await sync.after_controlled_write(USER, "MEMORY.md")

    assert result.outcome is Outcome.REJECTED
    assert "5000 bytes, over the limit of 4096" in (result.detail or "")
    assert await user_box.read_text("MEMORY.md") == before.content
    saved = await user_box.list(".memstrata/conflicts/")
    assert len(saved) == 1 and saved[0].endswith(".rejected.md")
    assert await user_box.read_text(saved[0]) == huge
    after = small.get_memory_file(USER, FileKind.MEMORY)
    assert after is not None and after.version == before.version


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
    with pytest.raises(InvalidFileTypeError, match="无效的文件名"):
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


# -- scenarios 4 and 5: session start --------------------------------------------------------


async def test_first_session_of_a_new_user_pushes_db_and_agents(
    sync: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    indexer: RecordingIndexer,
) -> None:
    results = await sync.start_session(USER, "s1")
    box = provider.for_user(USER, "s1")
    assert outcomes(results) == {
        "SOUL.md": Outcome.PUSHED,
        "USER.md": Outcome.PUSHED,
        "MEMORY.md": Outcome.PUSHED,
        "AGENTS.md": Outcome.PUSHED,
    }
    for kind in (FileKind.SOUL, FileKind.USER, FileKind.MEMORY):
        assert await box.read_text(kind.filename) == templates.load(kind)
    assert await box.read_text("AGENTS.md") == templates.agents_md()
    assert sorted(k.filename for _, k, _ in indexer.calls) == ["MEMORY.md", "USER.md"]


async def test_session_start_writes_sandbox_content_back_first(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    await sync.provision_user(USER)
    await user_box.write_text("USER.md", "- Name: Lin\n")  # edited, e.g. by a previous agent

    results = await sync.start_session(USER)

    assert outcomes(results)["USER.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == ("- Name: Lin\n", 2)


@pytest.mark.parametrize(
    "emptied",
    ["\u200e\n", "\u200f\n", "\u061c", "\u00ad", "\ufe0f", "\ufeff\u200f \u0301\n"],
    ids=["LRM", "RLM", "ALM", "soft-hyphen", "VS16", "mixed"],
)
async def test_a_file_emptied_down_to_invisible_marks_never_empties_the_db_row(
    emptied: str, sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    # An RTL editor that empties a file can leave its bidi marks behind; each of these once
    # replaced the whole USER.md in the DB, and no earlier version is kept to go back to.
    await sync.start_session(USER)
    before = store.get_memory_file(USER, FileKind.USER)
    assert before is not None
    await user_box.write_text("USER.md", emptied)

    results = await sync.start_session(USER)

    assert outcomes(results)["USER.md"] is Outcome.PUSHED
    assert store.get_memory_file(USER, FileKind.USER) == before
    assert await user_box.read_text("USER.md") == before.content


async def test_session_start_without_a_base_record_is_plain_sandbox_first(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    # A workspace that predates memstrata: content but no .memstrata/base record.
    await user_box.write_text("MEMORY.md", "old workspace notes\n")
    results = await sync.start_session(USER)
    assert outcomes(results)["MEMORY.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == ("old workspace notes\n", 2)


async def test_session_start_with_matching_copies_changes_nothing(
    sync: SyncService, store: MemoryStore
) -> None:
    await sync.start_session(USER)
    results = await sync.start_session(USER)
    assert outcomes(results) == {
        "SOUL.md": Outcome.UNCHANGED,
        "USER.md": Outcome.UNCHANGED,
        "MEMORY.md": Outcome.UNCHANGED,
        "AGENTS.md": Outcome.PUSHED,
    }
    assert {f.version for f in store.list_memory_files(USER)} == {1}


async def test_session_start_refreshes_a_lagging_sandbox_instead_of_reverting_the_db(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    sync = SyncService(store, provider)
    await sync.start_session(USER)
    # A frontend edit whose push failed: DB at version 2, sandbox still at version 1.
    broken = SyncService(store, FaultyProvider(provider, error=OSError(errno.EIO, "I/O error")))
    await broken.frontend_edit(USER, "user", "- Name: Newer\n")

    results = await sync.start_session(USER)

    assert outcomes(results)["USER.md"] is Outcome.PUSHED
    assert await user_box.read_text("USER.md") == "- Name: Newer\n"
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == ("- Name: Newer\n", 2)


async def test_session_start_overwrites_agents_md_and_never_stores_it(
    sync: SyncService, db: Database, templates: TemplateSet, user_box: LocalDirectorySandbox
) -> None:
    await user_box.write_text("AGENTS.md", "my own rules\n")
    await sync.start_session(USER)
    assert await user_box.read_text("AGENTS.md") == templates.agents_md()
    with db.engine.connect() as conn:
        types = conn.execute(text("SELECT file_type FROM user_memory ORDER BY file_type"))
        assert [r[0] for r in types] == ["memory_md", "soul_md", "user_md"]


async def test_session_start_with_the_db_unreachable_leaves_the_sandbox_alone(
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    await user_box.write_text("MEMORY.md", "local only\n")
    sync = SyncService(unreachable_store(templates), provider)

    results = await sync.start_session(USER)

    assert outcomes(results) == {
        "SOUL.md": Outcome.DB_UNAVAILABLE,
        "USER.md": Outcome.DB_UNAVAILABLE,
        "MEMORY.md": Outcome.DB_UNAVAILABLE,
        "AGENTS.md": Outcome.PUSHED,
    }
    assert await user_box.read_text("MEMORY.md") == "local only\n"
    assert [w["result"] for w in warning_events(logs)] == ["db_unavailable"] * 3


async def test_session_start_with_a_template_missing(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    tmp_path: Path,
    templates: TemplateSet,
    user_box: LocalDirectorySandbox,
) -> None:
    partial = tmp_path / "templates"
    partial.mkdir()
    for kind in (FileKind.SOUL, FileKind.USER, FileKind.MEMORY):
        (partial / kind.filename).write_text(templates.load(kind), encoding="utf-8")
    sync = SyncService(store, provider, templates=TemplateSet(partial))
    results = await sync.start_session(USER)
    agents = results[-1]
    assert (agents.filename, agents.outcome) == ("AGENTS.md", Outcome.TEMPLATE_MISSING)
    assert "MEMSTRATA_TEMPLATE_DIR" in (agents.detail or "")
    assert await user_box.read_text("AGENTS.md") is None


async def test_sandbox_read_failure_is_reported_not_raised(
    store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    faulty = FaultyProvider(
        provider,
        error=SandboxError("'MEMORY.md' is not valid UTF-8"),
        fail=lambda path, op: path == "MEMORY.md" and op == "read",
    )
    sync = SyncService(store, faulty)
    results = await sync.start_session(USER)
    assert outcomes(results)["MEMORY.md"] is Outcome.SANDBOX_FAILED
    assert outcomes(results)["USER.md"] is Outcome.PUSHED


async def test_a_file_that_is_not_utf8_is_kept_aside_and_the_db_copy_restored(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    await sync.start_session(USER)
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None
    # An agent's shell tool wrote Latin-1: it failed every read-back and stayed so for good.
    raw = "- caf\xe9 au lait\n".encode("latin-1")
    (provider.directory_for(USER) / "MEMORY.md").write_bytes(raw)

    results = await sync.start_session(USER)

    assert outcomes(results)["MEMORY.md"] is Outcome.REJECTED
    assert await user_box.read_text("MEMORY.md") == stored.content
    [copy] = await user_box.list(".memstrata/conflicts/")
    assert copy.endswith(".rejected.md")
    assert (provider.directory_for(USER) / copy).read_bytes() == raw
    after = store.get_memory_file(USER, FileKind.MEMORY)
    assert after is not None and after.version == stored.version


MEMORY_ZH = "# MEMORY\n\n## Notes\n- 2026-01-01: 我喜欢喝乌龙茶，住在杭州。\n"
MEMORY_JA = "# MEMORY\n- 東京でラーメンを食べた\n"


@pytest.mark.parametrize("deadline", [False, True], ids=["plain", "with-deadline"])
@pytest.mark.parametrize(
    "raw",
    [MEMORY_ZH.encode("gbk"), MEMORY_JA.encode("shift_jis"), MEMORY_ZH.encode("utf-16-le")],
    ids=["gbk", "shift-jis", "utf-16-without-mark"],
)
async def test_a_file_in_another_encoding_is_kept_aside_byte_for_byte(
    raw: bytes, deadline: bool, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # Only a copy with U+FFFD for every byte that did not decode used to be kept: each
    # Chinese or Japanese character of the agent's edit was lost for good. The bytes also
    # reach the directory through the deadline's wrapper, which every Memstrata has.
    sync = SyncService(store, with_deadline(provider, 5.0) if deadline else provider)
    await sync.start_session(USER)
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None
    (provider.directory_for(USER) / "MEMORY.md").write_bytes(raw)

    results = await sync.start_session(USER)

    assert outcomes(results)["MEMORY.md"] is Outcome.REJECTED
    [copy] = (provider.directory_for(USER) / ".memstrata" / "conflicts").iterdir()
    assert copy.name.endswith(".rejected.md") and copy.read_bytes() == raw
    assert (provider.directory_for(USER) / "MEMORY.md").read_text("utf-8") == stored.content
    assert store.get_memory_file(USER, FileKind.MEMORY) == stored


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
async def test_a_utf16_file_with_a_byte_order_mark_is_read_as_text(
    encoding: str, sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # Windows PowerShell 5 writes UTF-16 with a mark; the mark leaves no doubt about it.
    await sync.start_session(USER)
    data = MEMORY_ZH.encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    (provider.directory_for(USER) / "MEMORY.md").write_bytes(data)

    results = await sync.start_session(USER)

    assert outcomes(results)["MEMORY.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (MEMORY_ZH, 2)
    again = await sync.start_session(USER)
    assert outcomes(again)["MEMORY.md"] is Outcome.UNCHANGED

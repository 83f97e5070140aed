"""The rarer failure paths of the sync rule, each fed on purpose.

Races are staged with a store subclass that runs "another writer" right before a write,
or stops reaching the database after a number of reads; everything else is real.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import ContentTooLargeError, InvalidContentError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.dirty import SeenBase
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.results import SandboxEdit, choose_base
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.state import read_base
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import (
    USER,
    FaultyProvider,
    FaultySandbox,
    HookedStore,
    warning_events,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def hooked(db: Database, templates: TemplateSet) -> HookedStore:
    return HookedStore(db, templates)


async def test_write_back_gives_up_after_losing_every_race(
    hooked: HookedStore,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    sync = SyncService(hooked, provider)
    await sync.start_session(USER)
    await sync.frontend_edit(USER, "memory", "# Memory\n\nbody\n")  # the base
    await user_box.write_text("MEMORY.md", "# Memory\n\nbody\n\n- agent line\n")
    writes: list[int] = []

    def another_writer() -> None:  # a human saving a new first line before every attempt
        writes.append(1)
        store.upsert_memory_file(USER, "memory", f"# Memory {len(writes)}\n\nbody\n")

    hooked.before_upsert = another_writer

    result = await sync.after_controlled_write(USER, "MEMORY.md")

    assert len(writes) == 3  # MAX_WRITE_ATTEMPTS, each merge clean but already stale
    assert result.outcome is Outcome.CONFLICT
    hooked.before_upsert = None
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == "# Memory 3\n\nbody\n"
    assert await user_box.read_text("MEMORY.md") == "# Memory 3\n\nbody\n"
    [saved] = await user_box.list(".memstrata/conflicts/")
    assert await user_box.read_text(saved) == "# Memory\n\nbody\n\n- agent line\n"


async def test_db_lost_right_after_a_version_conflict(
    hooked: HookedStore,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    sync = SyncService(hooked, provider)
    await sync.start_session(USER)
    await user_box.write_text("USER.md", "agent\n")
    hooked.before_upsert = lambda: store.upsert_memory_file(USER, "user", "human\n")
    hooked.fail_get_after = hooked.gets + 1  # the read-back's own read works, the next fails

    result = await sync.after_controlled_write(USER, "USER.md")

    assert result.outcome is Outcome.DB_UNAVAILABLE
    assert "db went away" in (result.detail or "")
    assert await user_box.read_text("USER.md") == "agent\n"  # kept for the retry


async def test_row_deleted_under_a_read_back_is_inserted_again(
    sync: SyncService, store: MemoryStore, db: Database, provider: LocalSandboxProvider
) -> None:
    await sync.start_session(USER)
    box = FaultySandbox(provider.for_user(USER))
    await box.write_text("SOUL.md", "agent soul\n")

    async def delete_row() -> None:
        with db.engine.begin() as conn:
            conn.execute(text("DELETE FROM user_memory WHERE file_type = 'soul_md'"))

    box.after_read["SOUL.md"] = delete_row  # between the sandbox read and the DB write

    result = await sync.after_controlled_write(USER, "SOUL.md", sandbox=box)

    assert (result.outcome, result.version) == (Outcome.WRITTEN, 1)
    stored = store.get_memory_file(USER, FileKind.SOUL)
    assert stored is not None and stored.content == "agent soul\n"


async def test_unprovisioned_user_read_back(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    empty = await sync.after_controlled_write(USER, "MEMORY.md")
    assert (empty.outcome, empty.version) == (Outcome.UNCHANGED, None)
    assert store.list_memory_files(USER) == []
    await user_box.write_text("MEMORY.md", "first words\n")
    created = await sync.after_controlled_write(USER, "MEMORY.md")
    assert (created.outcome, created.version) == (Outcome.WRITTEN, 1)


async def test_rejected_content_that_cannot_be_preserved_stays_put(
    db: Database,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    small = MemoryStore(db.sessions, templates, max_content_bytes=2048)
    await SyncService(small, provider).start_session(USER)
    faulty = FaultyProvider(
        provider,
        error=PermissionError(13, "Permission denied"),
        fail=lambda path, op: path.startswith(".memstrata/conflicts/"),
    )
    await user_box.write_text("MEMORY.md", "y" * 3000)

    result = await SyncService(small, faulty).after_controlled_write(USER, "MEMORY.md")

    assert result.outcome is Outcome.REJECTED
    assert (result.detail or "").endswith("PermissionError: [Errno 13] Permission denied")
    assert await user_box.read_text("MEMORY.md") == "y" * 3000


async def test_rejected_content_for_a_user_without_a_row(
    db: Database,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    small = MemoryStore(db.sessions, templates, max_content_bytes=16)
    await user_box.write_text("USER.md", "z" * 40)
    result = await SyncService(small, provider).after_controlled_write(USER, "USER.md")
    assert (result.direction, result.outcome) == ("none", Outcome.REJECTED)
    assert len(await user_box.list(".memstrata/conflicts/")) == 1
    assert await user_box.read_text("USER.md") == "z" * 40


async def test_base_record_failures_are_warnings_and_cost_only_precision(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    faulty = FaultyProvider(
        provider,
        error=OSError(28, "No space left on device"),
        fail=lambda path, op: path.startswith(".memstrata/base/"),
    )
    sync = SyncService(store, faulty)
    results = await sync.start_session(USER)
    # No record, no file: a pushed copy nothing records would later read as an agent edit.
    assert {r.outcome for r in results if r.filename != "AGENTS.md"} == {Outcome.SANDBOX_FAILED}
    assert await user_box.read_text(".memstrata/base/USER.md.json") is None
    assert await user_box.read_text("USER.md") is None
    unrecorded = [w for w in warning_events(logs) if w["event"] == "sync.base_not_recorded"]
    assert [w["file"] for w in unrecorded] == ["SOUL.md", "USER.md", "MEMORY.md"]
    # Without bases a later edit is still written back (plain sandbox-first).
    await user_box.write_text("USER.md", "edited\n")
    assert (await sync.after_controlled_write(USER, "USER.md")).outcome is Outcome.WRITTEN


async def test_failing_invalidation_does_not_fail_the_frontend_edit(
    store: MemoryStore, provider: LocalSandboxProvider, logs: pytest.LogCaptureFixture
) -> None:
    class BrokenPool:
        def invalidate(self, user_id: str) -> None:
            raise RuntimeError("pool gone")

    sync = SyncService(store, provider, pool=BrokenPool())
    file = await sync.frontend_edit(USER, "soul", "s\n")
    assert file.version == 1
    [warning] = [w for w in warning_events(logs) if w["event"] == "sync.invalidate_failed"]
    assert warning["error"] == "RuntimeError: pool gone"


async def test_begin_round_with_a_failing_provider(
    store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    faulty = FaultyProvider(provider)
    faulty.raise_on_for_user = RuntimeError("down")
    tracker = await SyncService(store, faulty).begin_round(USER)
    assert tracker.case_sensitive is False
    assert tracker.base("USER.md") is None


async def test_write_without_sandbox_paths(
    hooked: HookedStore,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    templates: TemplateSet,
) -> None:
    sync = SyncService(hooked, provider)
    assert (
        await sync.write_without_sandbox(USER, FileKind.USER, lambda old: old + "a\n")
    ).version == 1  # no row yet: inserted
    racing: list[int] = []

    def human() -> None:
        if len(racing) < 1:
            racing.append(1)
            store.upsert_memory_file(USER, "user", "human\n")

    hooked.before_upsert = human
    result = await sync.write_without_sandbox(USER, FileKind.USER, lambda old: old + "b\n")
    assert (result.outcome, result.version) == (Outcome.WRITTEN, 3)  # retried on the new copy
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.content == "human\nb\n"
    # A new version at every attempt, each lost to it (the same text: a version all the same).
    hooked.before_upsert = lambda: store.upsert_memory_file(
        USER, "user", "again\n", skip_unchanged=False
    )
    gave_up = await sync.write_without_sandbox(USER, FileKind.USER, lambda old: old + "c\n")
    assert gave_up.outcome is Outcome.CONFLICT
    hooked.before_upsert = None
    hooked.fail_get_after = hooked.gets
    down = await sync.write_without_sandbox(USER, FileKind.USER, lambda old: old)
    assert down.outcome is Outcome.DB_UNAVAILABLE


BASE_USER = "# User\n\n## Profile\n- Name: Ada\n\n## Work\n- Job: none\n"


@pytest.mark.parametrize(
    ("human", "outcome", "expected"),
    [
        # The DB has not moved since the base: the edited copy is written as it is.
        (None, Outcome.WRITTEN, BASE_USER + "- unsaved\n- new\n"),
        # A human edited other lines meanwhile: the three-way merge keeps both.
        (
            BASE_USER.replace("Ada", "Ada L."),
            Outcome.MERGED,
            BASE_USER.replace("Ada", "Ada L.") + "- unsaved\n- new\n",
        ),
        # ... or appended too: both appends are kept, the human's first.
        (
            BASE_USER + "- human\n",
            Outcome.MERGED,
            BASE_USER + "- human\n- unsaved\n- new\n",
        ),
        # ... the same lines: only this edit, on the human's copy; the unsaved line stays in
        # the sandbox copy for the read-back's conflict policy.
        (
            BASE_USER.replace("none", "pilot"),
            Outcome.WRITTEN,
            BASE_USER.replace("none", "pilot") + "- new\n",
        ),
    ],
)
async def test_write_without_sandbox_carries_the_sandbox_copy_by_the_rule(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    human: str | None,
    outcome: Outcome,
    expected: str,
) -> None:
    sync = SyncService(store, provider)
    await sync.frontend_edit(USER, "user", BASE_USER)  # version 1, the sandbox's base record
    copy = BASE_USER + "- unsaved\n"  # an edit whose sync failed, still in the sandbox
    await user_box.write_text("USER.md", copy)
    if human is not None:
        store.upsert_memory_file(USER, "user", human)

    def add(text: str) -> str:
        return text + "- new\n"

    result = await sync.write_without_sandbox(
        USER, FileKind.USER, add, edited=SandboxEdit(copy, add(copy)), sandbox=user_box
    )

    assert (result.direction, result.outcome) == ("agent->db", outcome)
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == (expected, result.version)
    assert await user_box.read_text("USER.md") == copy  # the sandbox is not written
    carried = human is None or outcome is Outcome.MERGED
    assert result.base == (SyncBase(stored.version, copy) if carried else None)
    if carried:  # so the copy reads as lagging, also to a session without this result
        assert await read_base(user_box, "USER.md") == SyncBase(stored.version, copy)
        assert (await sync.after_controlled_write(USER, "USER.md")).outcome is Outcome.PUSHED
        assert await user_box.read_text("USER.md") == expected


async def test_write_without_sandbox_does_not_carry_a_copy_that_only_lags(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    sync = SyncService(store, provider)
    await sync.frontend_edit(USER, "user", BASE_USER)
    newer = BASE_USER + "- from another session\n"
    store.upsert_memory_file(USER, "user", newer)  # the sandbox copy now lags behind

    result = await sync.write_without_sandbox(
        USER,
        FileKind.USER,
        lambda text: text + "- new\n",
        edited=SandboxEdit(BASE_USER, BASE_USER + "- new\n"),
        sandbox=user_box,
    )

    assert result.outcome is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.content == newer + "- new\n"
    assert result.base == SyncBase(1, BASE_USER)  # still its base: a lagging copy


async def test_write_without_sandbox_does_not_store_an_edit_twice(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    # A retried call whose first attempt reached the DB: the edit is not applied again.
    sync = SyncService(store, provider)
    await sync.frontend_edit(USER, "user", BASE_USER)
    copy = BASE_USER + "- unsaved\n"
    await user_box.write_text("USER.md", copy)
    edited = SandboxEdit(copy, copy + "- new\n")
    store.upsert_memory_file(USER, "user", edited.after)

    result = await sync.write_without_sandbox(
        USER, FileKind.USER, lambda text: text + "- new\n", edited=edited, sandbox=user_box
    )

    assert (result.outcome, result.version) == (Outcome.UNCHANGED, 2)
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.content == edited.after


def test_a_seen_base_outranks_a_base_record_that_is_not_newer() -> None:
    record = SyncBase(3, "record")
    assert choose_base(record, SyncBase(9, "snapshot")) == record  # a snapshot never does
    assert choose_base(None, SyncBase(9, "snapshot")) == SyncBase(9, "snapshot")
    assert choose_base(record, SeenBase(3, "seen")) == SeenBase(3, "seen")
    assert choose_base(record, SeenBase(2, "seen")) == record  # pushed since, by someone else
    assert choose_base(None, None) is None


async def test_invalid_content_is_refused_before_the_version_and_the_claim(
    db: Database, templates: TemplateSet, provider: LocalSandboxProvider
) -> None:
    small = MemoryStore(db.sessions, templates, max_content_bytes=2048)
    sync = SyncService(small, provider)
    await sync.start_session(USER)
    # A stale version with bad content: the content's error (413 / 422), not a 409 that
    # tells the client to reload and send the same bad content again.
    with pytest.raises(ContentTooLargeError):
        await sync.frontend_edit(USER, "memory", "y" * 3000, expected_version=7)
    with pytest.raises(InvalidContentError):
        await sync.frontend_edit(USER, "memory", "a\x00b", expected_version=7)
    # A failed write held no claim: a valid write on the same version goes through.
    with pytest.raises(ContentTooLargeError):
        await sync.frontend_edit(USER, "memory", "y" * 3000, expected_version=1)
    written = await sync.frontend_edit(USER, "memory", "fine\n", expected_version=1)
    assert written.version == 2

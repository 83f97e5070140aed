"""The version memstrata last left each sandbox file at (:mod:`memstrata.sandbox.synced`):
kept in ``sandbox_synced`` under the provider's identity, in the process for a provider
without one; what a note replaces, whose it is, and a note that cannot be written. Real
database and directories; the unreachable store is the one fault injected."""

from __future__ import annotations

import hashlib
import logging
import socket
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.results import ROUND_END, Outcome, SyncResult, Target
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.sync import SyncService
from memstrata.sandbox.synced import SyncedVersions, provider_identity, root_key, sandbox_key
from memstrata.sandbox.timed import with_deadline
from tests.sandbox.support import USER, FaultyProvider, unreachable_store, warning_events

pytestmark = pytest.mark.anyio

MEMORY = FileKind.MEMORY
MEMORY_MD = MEMORY.filename
HUMAN = "- human: chose plan B"
ROOT = "/srv/memstrata/sandboxes"


def rows(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM sandbox_synced")).scalar_one())


async def test_a_note_replaces_the_one_before_lower_or_higher(db: Database) -> None:
    """Notes are taken under the sandbox's lock in the order its file writes land: a push of
    version 3 that lands after one of 5 leaves the copy of 3, so the note must say 3."""
    versions = SyncedVersions(db.sessions, ROOT)
    await versions.note(USER, "S", MEMORY, 5)
    await versions.note(USER, "S", MEMORY, 3)
    assert await versions.get(USER, "S", MEMORY) == 3
    await versions.note(USER, "S", MEMORY, 4)
    assert await versions.get(USER, "S", MEMORY) == 4


async def test_a_note_is_one_users_sandboxs_file_under_one_root(db: Database) -> None:
    versions = SyncedVersions(db.sessions, ROOT)
    notes = [
        (USER, None, MEMORY, 2),
        (USER, "S", MEMORY, 4),
        (USER, "s", MEMORY, 6),  # another session: ids differing in case are two sandboxes
        (USER, "S", FileKind.USER, 7),
        ("someone-else", None, MEMORY, 9),
    ]
    for user_id, session_id, kind, version in notes:
        await versions.note(user_id, session_id, kind, version)

    read = [await versions.get(u, s, k) for u, s, k, _ in notes]

    assert read == [2, 4, 6, 7, 9]
    assert await versions.get("nobody", None, MEMORY) is None
    assert await versions.get(USER, "T", MEMORY) is None
    other_root = SyncedVersions(db.sessions, ROOT + "-b")
    assert [await other_root.get(u, s, k) for u, s, k, _ in notes] == [None] * len(notes)


async def test_a_session_id_of_any_length_gets_a_key_of_its_own(db: Database) -> None:
    """The key is the session sandbox's directory name: bounded, and two ids that share a
    long prefix still name two sandboxes."""
    versions = SyncedVersions(db.sessions, ROOT)
    long_a, long_b = "x" * 500 + "a", "x" * 500 + "b"
    await versions.note(USER, long_a, MEMORY, 1)
    await versions.note(USER, long_b, MEMORY, 2)
    read = [await versions.get(USER, session_id, MEMORY) for session_id in (long_a, long_b)]
    assert read == [1, 2]
    assert len(sandbox_key(long_a)) <= 200 and sandbox_key(None) == ""


def test_the_root_is_stored_as_its_sha256() -> None:
    long_root = "/" + "d" * 4000
    assert root_key(long_root) == hashlib.sha256(long_root.encode()).hexdigest()
    assert len(root_key(ROOT)) == 64


async def test_without_an_identity_the_note_stays_in_the_process(db: Database) -> None:
    """A provider that cannot say which sandboxes it names (no ``identity()``, or None):
    another process may hold other sandboxes under the same ids, so nothing is shared."""
    versions = SyncedVersions(db.sessions, None)
    await versions.note(USER, None, MEMORY, 3)

    assert await versions.get(USER, None, MEMORY) == 3
    assert await SyncedVersions(db.sessions, None).get(USER, None, MEMORY) is None
    assert rows(db) == 0


def test_the_identity_is_the_host_and_the_local_roots_real_path_beneath_the_deadline(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    local = LocalSandboxProvider(tmp_path / "link")
    expected = f"{socket.gethostname()}:{real}"

    assert provider_identity(local) == expected
    assert provider_identity(LocalSandboxProvider(real)) == expected  # by any path
    assert provider_identity(with_deadline(local, 5)) == expected
    assert provider_identity(FaultyProvider(local)) is None  # a provider without the hook


def test_replicas_on_two_hosts_with_the_same_root_path_have_two_identities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every replica's container says MEMSTRATA_DATA_DIR=/data, each its own volume, one
    database: the same real path is another sandbox on another host, and a shared note
    would make one replica distrust its valid base records (a stale copy written over a
    newer version, as tests/mcp/test_replicas.py saw with roots of their own)."""
    local = LocalSandboxProvider(tmp_path)
    monkeypatch.setattr(socket, "gethostname", lambda: "replica-a")
    on_a = provider_identity(local)
    monkeypatch.setattr(socket, "gethostname", lambda: "replica-b")
    on_b = provider_identity(local)

    assert on_a is not None and on_b is not None and on_a != on_b


async def test_a_note_that_cannot_be_written_leaves_the_result_and_logs_a_warning(
    templates: TemplateSet, provider: LocalSandboxProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """The note before stays (lower than the copy's: lagging, so safe); the sync's result
    is the caller's all the same."""
    versions = SyncedVersions(unreachable_store(templates).sessions, ROOT)
    t = Target(USER, None, provider.for_user(USER), ROUND_END)
    result = SyncResult(MEMORY_MD, "none", Outcome.UNCHANGED, 3, base=SyncBase(3, "x\n"))
    caplog.set_level(logging.WARNING, logger="memstrata.sandbox.sync")

    assert await versions.noted(t, MEMORY, result, None) is result

    [warning] = warning_events(caplog)
    assert (warning["event"], warning["file"]) == ("sync.note_failed", MEMORY_MD)


async def test_a_result_that_left_no_db_version_is_not_noted(
    db: Database, provider: LocalSandboxProvider
) -> None:
    versions = SyncedVersions(db.sessions, ROOT)
    failed = SyncResult(MEMORY_MD, "none", Outcome.SANDBOX_FAILED, None)
    t = Target(USER, None, provider.for_user(USER), ROUND_END)

    assert await versions.noted(t, MEMORY, failed, None) is failed
    assert await versions.get(USER, None, MEMORY) is None


async def test_replicas_with_their_own_roots_keep_their_own_notes(
    store: MemoryStore, tmp_path: Path
) -> None:
    """Two replicas on one database, each with its own sandbox root (tests/mcp/
    test_replicas.py). Replica B pushes a person's edit (version 2) into its own sandbox;
    replica A's sandbox still holds version 1 with a valid base record. B's note must not
    make A distrust that record: with no base, A's stale copy would be written over the
    person's edit. A pushes version 2 instead."""
    a = SyncService(store, LocalSandboxProvider(tmp_path / "replica-a"))
    b = SyncService(store, LocalSandboxProvider(tmp_path / "replica-b"))
    await a.provision_user(USER)
    await b.start_session(USER)
    found = store.get_memory_file(USER, MEMORY)
    assert found is not None and found.version == 1
    await b.frontend_edit(USER, "memory", found.content + HUMAN + "\n", expected_version=1)

    [result] = [r for r in await a.start_session(USER) if r.filename == MEMORY_MD]

    after = store.get_memory_file(USER, MEMORY)
    assert after is not None and (HUMAN in after.content, after.version) == (True, 2)
    assert result.outcome is Outcome.PUSHED
    box = a.sandboxes.for_user(USER)
    assert await box.read_text(MEMORY_MD) == after.content

"""Erasing a user (``memory.erase``, ``Memstrata.erase_user``) on the real database and real
sandbox directories: every table, another process's cached index and agent pool, the
sandboxes, running it again, its log line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from memstrata.agent.pool import AgentPool
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.errors import SandboxPathError
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.snapshot_repository import SnapshotRepository, StoredSnapshot
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.synced import root_key
from memstrata.sandbox.synced_repository import SyncedRepository
from memstrata.skills.repository import UserSkillConfigRepository
from tests.memory.erase_support import TABLES, counts


def generation(db: Database, user_id: str) -> int:
    with db.sessions() as session:
        return EmbeddingRepository(session, user_id).state().generation


def write(path: Path, content: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def fill(mem: Memstrata, user_id: str, words: str) -> None:
    """A user with all three memory files, two turns, a skill switch, a snapshot and the
    versions a sandbox file was last synced at under two sandbox roots."""
    mem.store.provision_default_files(user_id)
    mem.store.upsert_memory_file(user_id, FileKind.USER, f"# User\n\n{words} in USER.md\n")
    mem.import_rounds(
        user_id, [Round("s1", 0, f"{words} turn zero"), Round("s1", 1, f"{words} turn one")]
    )
    with transaction(mem.db.sessions) as session:
        UserSkillConfigRepository(session, user_id).set_enabled("web-search", False)
        index = EmbeddingRepository(session, user_id)
        index.lock()
        ids = sorted(index.live_ids())
        stored = SnapshotRepository(session, user_id).save_snapshot(
            "", StoredSnapshot("test-format", max(ids), len(ids), b"payload"), ids
        )
        assert stored
        for root in ("/srv/a", "/srv/b"):
            SyncedRepository(session, user_id).note(root_key(root), "", FileKind.USER.file_type, 2)


def test_every_table_of_the_user_is_emptied_and_no_one_elses(db: Database, mem: Memstrata) -> None:
    fill(mem, "alice", "alpaca")
    fill(mem, "bob", "badger")
    bob_before = counts(db, "bob")
    before = counts(db, "alice")
    assert all(before.values()), before
    generation_before = generation(db, "alice")

    erasure = mem.erase_user("alice")

    assert counts(db, "alice") == dict.fromkeys(TABLES, 0) | {"memory_index_state": 1}
    uncounted = ("memory_index_state", "sandbox_synced")  # counters; versions (no content)
    assert erasure.deleted == {t: n for t, n in before.items() if t not in uncounted}
    # The state row stays, bumped: every cached index of alice is now out of date.
    assert erasure.generation == generation(db, "alice") == generation_before + 1
    assert counts(db, "bob") == bob_before
    assert mem.search.search("bob", "badger").hits
    assert not mem.search.search("alice", "alpaca").hits
    assert mem.store.list_memory_files("alice") == []
    assert [u.user_id for u in mem.list_users()] == ["bob"]


def test_another_process_drops_its_cached_index_and_a_later_write_is_a_new_users(
    db: Database, open_runtime: Callable[[], Memstrata]
) -> None:
    """The reader has alice's index cached at generation 1; the erase and one new write
    bring the database to generation 3 — had the erase deleted the state row, the new write
    would be generation 1 again and the reader would keep serving the erased turn."""
    writer, reader = open_runtime(), open_runtime()
    writer.import_rounds("alice", [Round("old", 0, "the blue door is in Lisbon")])
    assert generation(db, "alice") == 1
    assert [h.text for h in reader.search.search("alice", "blue door").hits]
    held = reader.search.cache.get("alice", None)
    assert held.rows

    writer.erase_user("alice")
    assert held.rows, "not this process: the reader learns of it at its next use"
    assert not reader.search.search("alice", "blue door Lisbon").hits
    assert held.rows == {}

    writer.import_rounds("alice", [Round("new", 0, "a green window in Porto")])
    hits = reader.search.search("alice", "blue door green window").hits
    assert [h.file_path for h in hits] == ["sessions/new/0"]


def test_this_process_drops_its_cached_index_at_once(db: Database, mem: Memstrata) -> None:
    mem.import_rounds("alice", [Round("s", 0, "the blue door is in Lisbon")])
    assert mem.search.search("alice", "blue door").hits
    held = mem.search.cache.get("alice", None)
    assert held.rows
    mem.erase_user("alice")
    assert held.rows == {} and held.generation == generation(db, "alice")


def test_every_agent_pool_drops_the_user(db: Database, mem: Memstrata) -> None:
    other = AgentPool[str](db.engine)  # another process's pool: its own LISTEN connection
    try:
        assert other.start(timeout_s=10)
        other.get("alice", lambda: "alice's agent")
        other.get("bob", lambda: "bob's agent")
        mem.pool.get("alice", lambda: "alice's agent here")
        mem.erase_user("alice")
        assert "alice" not in mem.pool
        deadline = time.monotonic() + 10
        while "alice" in other and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "alice" not in other and "bob" in other
    finally:
        other.close()


def test_the_sandbox_goes_with_its_sessions_and_no_other_users(
    mem: Memstrata, settings: Settings
) -> None:
    root = settings.resolved_sandbox_root

    async def populate() -> None:
        for user_id, session_id in (("alice", None), ("alice", "s1"), ("bob", None)):
            await mem.sandboxes.for_user(user_id, session_id).write_text("USER.md", user_id)

    anyio.run(populate)
    mem.store.provision_default_files("alice")
    alice = root / safe_dir_name("alice")
    assert (alice / "sessions" / "s1" / "USER.md").is_file()

    erasure = mem.erase_user("alice")

    assert erasure.sandbox == "removed"
    assert not alice.exists()
    assert sorted(p.name for p in root.iterdir()) == ["bob"]
    assert (root / "bob" / "USER.md").read_text() == "bob"


def test_a_symlinked_user_directory_is_refused_before_anything_is_deleted(
    db: Database, mem: Memstrata, settings: Settings, tmp_path: Path
) -> None:
    """A link planted as alice's directory leads to bob's: the erase must not delete
    bob's files through it, and it stops before alice's rows are deleted, so running it
    again once the link is gone erases her whole."""
    root = settings.resolved_sandbox_root
    write(root / "bob" / "USER.md", "bob's own")
    (root / "alice").symlink_to(root / "bob", target_is_directory=True)
    mem.store.provision_default_files("alice")
    before = counts(db, "alice")

    with pytest.raises(SandboxPathError, match="symlink"):
        mem.erase_user("alice")

    assert (root / "alice").is_symlink()
    assert (root / "bob" / "USER.md").read_text() == "bob's own"
    assert counts(db, "alice") == before
    (root / "alice").unlink()
    assert mem.erase_user("alice").deleted["user_memory"] == 3


def test_erasing_again_changes_nothing_and_an_unknown_user_gets_no_state(
    db: Database, mem: Memstrata, settings: Settings
) -> None:
    fill(mem, "alice", "alpaca")
    write(settings.resolved_sandbox_root / "alice" / "USER.md")
    first = mem.erase_user("alice")
    assert first.found and first.sandbox == "removed"
    after = counts(db, "alice")

    again = mem.erase_user("alice")

    assert not again.found
    assert again.deleted == dict.fromkeys(first.deleted, 0)
    assert again.sandbox == "absent" and again.generation == first.generation
    assert counts(db, "alice") == after
    ghost = mem.erase_user("ghost")
    assert not ghost.found and ghost.generation == 0
    assert counts(db, "ghost") == dict.fromkeys(TABLES, 0)


def test_an_erase_is_logged_with_its_counts(
    mem: Memstrata, caplog: pytest.LogCaptureFixture
) -> None:
    fill(mem, "alice", "alpaca")
    caplog.set_level(logging.INFO, logger="memstrata")
    erasure = mem.erase_user("alice")
    (event,) = [event_fields(r) for r in caplog.records if r.getMessage() == "user.erased"]
    assert event["user_id"] == "alice" and event["deleted"] == erasure.deleted
    assert event["sandbox"] == "absent" and event["generation"] == erasure.generation


class NoHookProvider:
    """A host's provider that cannot erase (no ``erase_user``)."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalSandboxProvider(root)

    def for_user(self, user_id: str, session_id: str | None = None) -> LocalDirectorySandbox:
        return self.inner.for_user(user_id, session_id)


def test_a_provider_without_the_hook_is_skipped_with_a_log_line(
    db: Database, settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "boxes" / "alice" / "USER.md")
    mem = Memstrata.open(
        settings, database=db, embedder=None, sandboxes=NoHookProvider(tmp_path / "boxes")
    )
    try:
        mem.store.provision_default_files("alice")
        caplog.set_level(logging.INFO, logger="memstrata")
        erasure = mem.erase_user("alice")
    finally:
        mem.pool.close()
    assert erasure.sandbox == "skipped" and erasure.deleted["user_memory"] == 3
    assert (tmp_path / "boxes" / "alice" / "USER.md").exists()
    skipped = [event_fields(r) for r in caplog.records if r.getMessage().endswith("skipped")]
    assert skipped and skipped[0]["event"] == "user.erase.sandbox_skipped"

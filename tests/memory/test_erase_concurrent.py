"""Erasing a user while others write, on the real database: writes in flight land before the
erase and are erased, writes behind it land after it as a new user's, and the query cache
forgets the user's search texts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.memory.erase import UserEraser
from memstrata.memory.kinds import FileKind
from memstrata.memory.repository import MemoryFileRepository
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.query_cache import CachedQueryEmbedder
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from memstrata.sandbox.local import LocalSandboxProvider
from tests.memory.erase_support import counts

# -- concurrent writers ------------------------------------------------------------------


def waiting_for_locks(
    db: Database, at_least: int = 1, *, advisory: bool = False, timeout_s: float = 20.0
) -> None:
    """Until ``at_least`` backends wait for a lock (``advisory``: for the index lock)."""
    deadline = time.monotonic() + timeout_s
    query = "SELECT count(*) FROM pg_locks WHERE NOT granted"
    if advisory:
        query += " AND locktype = 'advisory'"
    while time.monotonic() < deadline:
        with db.engine.connect() as conn:
            if int(conn.execute(text(query)).scalar_one()) >= at_least:
                return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} backends ever waited for a lock")


class InThread:
    """Run ``fn`` in a thread; ``result()`` joins it and re-raises its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._outcome: list[Any] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._outcome.append(fn())
        except BaseException as exc:
            self._error.append(exc)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout_s: float = 30.0) -> Any:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "still blocked"
        if self._error:
            raise self._error[0]
        return self._outcome[0]


def eraser(mem: Memstrata) -> UserEraser:
    return UserEraser(mem.db.sessions, LocalSandboxProvider(mem.settings.resolved_sandbox_root))


def test_writes_in_flight_land_before_the_erase_and_are_erased(
    db: Database, mem: Memstrata
) -> None:
    """One writer has updated USER.md, another holds the index lock after creating
    MEMORY.md (a file the erase's first pass cannot see): the erase waits for both and
    deletes what they wrote, text and search rows together."""
    mem.store.upsert_memory_file("alice", FileKind.USER, "first")
    staged = mem.indexer.stage_memory_file("alice", FileKind.MEMORY, "a new file")
    with db.sessions() as updating, db.sessions() as creating:
        changed = MemoryFileRepository(updating, "alice").compare_and_set("user_md", "edited", 1)
        assert changed is not None
        MemoryFileRepository(creating, "alice").insert_if_absent("memory_md", "a new file")
        staged.apply(creating)  # takes the index lock and writes MEMORY.md's rows
        running = InThread(lambda: eraser(mem).erase("alice"))
        waiting_for_locks(db)  # on the row USER.md's writer holds
        updating.commit()
        waiting_for_locks(db, advisory=True)  # the erase, on the index lock
        assert running.alive()
        creating.commit()
        erasure = running.result()
    assert erasure.deleted["user_memory"] == 2
    assert erasure.deleted["memory_embeddings"] == 2  # USER.md's chunk and MEMORY.md's
    assert counts(db, "alice")["user_memory"] == counts(db, "alice")["memory_embeddings"] == 0


def test_writes_behind_the_erase_land_after_it_as_a_new_users(db: Database, mem: Memstrata) -> None:
    """While the erase waits for the index lock it holds alice's files: an If-Match write
    of the old version waits and then finds no file (409), an unconditional one waits and
    stores version 1; a turn waits for the index lock and is indexed afresh."""
    mem.store.upsert_memory_file("alice", FileKind.USER, "before the erase")
    mem.import_rounds("alice", [Round("old", 0, "a turn from before")])
    with db.sessions() as holding:
        EmbeddingRepository(holding, "alice").lock()
        running = InThread(lambda: eraser(mem).erase("alice"))
        waiting_for_locks(db, advisory=True)

        def if_match() -> object:
            with transaction(db.sessions) as session:
                return MemoryFileRepository(session, "alice").compare_and_set("user_md", "stale", 1)

        def unconditional() -> int:
            with transaction(db.sessions) as session:
                return MemoryFileRepository(session, "alice").upsert("user_md", "after").version

        stale, fresh = InThread(if_match), InThread(unconditional)
        waiting_for_locks(db, at_least=3)
        turn = InThread(lambda: mem.import_rounds("alice", [Round("new", 0, "a new turn")]))
        waiting_for_locks(db, at_least=2, advisory=True)  # behind the erase
        holding.commit()
        erasure = running.result()
        assert stale.result() is None
        assert fresh.result() == 1
        turn.result()
    assert erasure.deleted["user_memory"] == 1 and erasure.deleted["memory_embeddings"] == 2
    stored = mem.store.get_memory_file("alice", FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == ("after", 1)
    assert [h.file_path for h in mem.search.search("alice", "turn").hits] == ["sessions/new/0"]


def test_this_processs_query_cache_forgets_the_users_search_texts(
    open_runtime: Callable[..., Memstrata], embedder: OpenAICompatibleEmbedder
) -> None:
    mem = open_runtime(embedder)
    for user in ("alice", "bob"):
        mem.import_rounds(user, [Round("s", 0, "the blue door is in Lisbon")])
        assert mem.search.search(user, "where is the blue door").mode == "hybrid"
    cache = mem.search.embedder
    assert isinstance(cache, CachedQueryEmbedder) and len(cache) == 2
    mem.erase_user("alice")
    assert len(cache) == 1  # bob's search text only

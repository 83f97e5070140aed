"""The check before every search (is the cached index current?) on the state reader's own
pool: one user's state per read, a connection killed by a PostgreSQL restart replaced once,
the pool closed with the runtime (real PostgreSQL; the check's statement and transaction
are tested in test_cache_refresh)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import QueuePool

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.errors import RuntimeClosedError
from memstrata.retrieval import state_reader
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.records import IndexState
from memstrata.runtime import Memstrata
from tests.reliability.test_database_faults import pg_ctl

from .test_cache_refresh import _add


def test_the_check_reads_one_users_state(db: Database) -> None:
    _add(db, "gil", ["a kite", "a boat"])
    _add(db, "hal", ["a lamp"])
    reader = state_reader.state_reader(db.engine)
    assert reader is state_reader.state_reader(db.engine)  # one per engine
    assert reader.read("gil") == IndexState(1, 0, 1)
    assert reader.read("nobody") == IndexState(0, 0, 0)


def test_the_cache_checks_through_the_reader_it_is_given(db: Database) -> None:
    """The composition root hands the cache its check (``states``, as ``Memstrata.open``
    does with its engine's reader); the cache then reads on that reader's pool."""
    _add(db, "lou", ["a paper kite"])
    reader = state_reader.StateReader(db.engine)
    try:
        cache = IndexCache(db.sessions, states=reader.read)
        for _ in range(2):  # a load, then a check: on the reader given
            assert len(cache.get("lou", None).rows) == 1
        assert reader.engine.pool.checkedin() == 1  # type: ignore[attr-defined]
    finally:
        reader.dispose()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[EmbeddedPostgres, Database]]:
    """A PostgreSQL of this test's own, to restart without disturbing the session's."""
    server = EmbeddedPostgres(tmp_path / "pg", database="memstrata_restart")
    url = server.start()
    try:
        db = Database.open(
            Settings(environment="test", database_url=url, data_dir=tmp_path / "data")
        )
        try:
            yield server, db
        finally:
            db.close()
    finally:
        server.stop()


def test_the_check_reconnects_once_after_a_postgresql_restart(
    own_server: tuple[EmbeddedPostgres, Database],
) -> None:
    """The pool has no pre-ping: the connection a restart killed fails the read, is dropped,
    and the read runs again on a new one. While the server is down the search fails with
    the error the API answers with 503, and it works again once the server is back."""
    server, db = own_server
    _add(db, "ida", ["a red kite"])
    cache = IndexCache(db.sessions)
    for _ in range(2):  # a load, then a check: its connection stays in the pool
        assert len(cache.get("ida", None).rows) == 1
    pool = state_reader.state_reader(db.engine).engine.pool
    assert isinstance(pool, QueuePool) and pool.checkedin() == 1
    dropped: list[object] = []
    event.listen(pool, "invalidate", lambda *_a: dropped.append(1))

    pg_ctl(server.pgdata, "-m", "fast", "stop")
    assert server.restart()
    assert len(cache.get("ida", None).rows) == 1
    assert len(dropped) == 1  # the dead connection, then one good read

    pg_ctl(server.pgdata, "-m", "fast", "stop")
    with pytest.raises(OperationalError):
        cache.get("ida", None)
    assert server.restart()
    assert len(cache.get("ida", None).rows) == 1


def _backend_alive(db: Database, pid: int) -> bool:
    with db.engine.connect() as conn:
        found = conn.execute(text("SELECT 1 FROM pg_stat_activity WHERE pid = :p"), {"p": pid})
        return found.first() is not None


def test_the_checks_connections_close_with_the_runtime(settings: Settings, db: Database) -> None:
    """``Memstrata.close`` closes the database's engine, and the reader's pool with it."""
    mem = Memstrata.open(settings, embedder=None)
    try:
        for _ in range(2):  # a load, then a check: its connection stays in the pool
            mem.search.cache.get("jay", None)
        pool = state_reader.state_reader(mem.db.engine).engine.pool
        assert isinstance(pool, QueuePool) and pool.checkedin() == 1
        held = pool.connect()
        pid = held.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        held.close()
        assert _backend_alive(db, pid)
    finally:
        mem.close()
    deadline = time.monotonic() + 10
    while _backend_alive(db, pid):
        assert time.monotonic() < deadline, "the check's connection outlived the runtime"
        time.sleep(0.05)


def test_a_closed_runtime_refuses_the_check(
    db: Database, open_runtime: Callable[..., Memstrata]
) -> None:
    """A search of a user whose index is held still fails with ``RuntimeClosedError`` once
    the runtime is closed — not with a database error, nor an answer — although the check
    no longer takes one of the runtime's sessions."""
    _add(db, "kim", ["a red kite"])
    mem = open_runtime()
    assert [h.text for h in mem.search.search("kim", "kite").hits] == ["a red kite"]
    mem.close()
    with pytest.raises(RuntimeClosedError):
        mem.search.search("kim", "kite")


def test_a_connection_in_use_when_the_pool_is_disposed_is_closed_not_pooled(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monitor disposes the pools when PostgreSQL is lost, so a smart shutdown is not
    held up by idle connections; a search in flight then must not hand its connection back
    to the pool, where it would hold the shutdown up again."""
    _add(db, "ivy", ["a drum"])
    reader = state_reader.StateReader(db.engine)
    try:
        reader.read("ivy")
        assert reader.engine.pool.checkedin() == 1  # type: ignore[attr-defined]
        real = state_reader.read_state
        used: list[Any] = []

        def disposed_meanwhile(cursor: Any, user_id: str) -> IndexState:
            reader.dispose()  # as the monitor does, while this read holds its connection
            used.append(cursor.connection)
            return real(cursor, user_id)

        monkeypatch.setattr(state_reader, "read_state", disposed_meanwhile)
        assert reader.read("ivy") == IndexState(1, 0, 1)
        # Closed at once: handed back to the disposed pool it would stay open until that
        # pool is garbage-collected.
        assert used[0].closed
        assert reader.engine.pool.checkedin() == 0  # type: ignore[attr-defined]
        monkeypatch.setattr(state_reader, "read_state", real)
        assert reader.read("ivy") == IndexState(1, 0, 1)  # and it reconnects
        assert reader.engine.pool.checkedin() == 1  # type: ignore[attr-defined]
    finally:
        reader.dispose()

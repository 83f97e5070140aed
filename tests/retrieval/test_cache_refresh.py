"""How a cached index catches up with writes made anywhere (real PostgreSQL).

An append is read as "rows with larger ids"; the user's ids are read and compared only
when the removal count says rows were deleted since the last refresh — or, when a writer
bumped the generation without counting (an earlier release, a script), when the user's
row count says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, event, text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import state_reader
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.records import IndexState, NewChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.staging import content_hash

from .stored import insert_rows


def _add(db: Database, user: str, texts: list[str], first: int = 0) -> None:
    chunks = [
        NewChunk(f"sessions/s/{first + i}", 0, t, content_hash(t), datetime(2026, 1, 1, tzinfo=UTC))
        for i, t in enumerate(texts)
    ]
    insert_rows(db, user, chunks)


def _delete(db: Database, user: str, ids: list[int]) -> None:
    with transaction(db.sessions) as session:
        repo = EmbeddingRepository(session, user)
        repo.lock()
        repo.delete_ids(ids)
        repo.bump_generation()


def _state(db: Database, user: str) -> IndexState:
    with db.sessions() as session:
        return EmbeddingRepository(session, user).state()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the cache counted the user's rows and read all their ids (the real
    methods run; only the calls are counted)."""
    seen = {"count": 0, "live_ids": 0}
    for name in seen:
        real: Callable[..., Any] = getattr(EmbeddingRepository, name)

        def spy(self: EmbeddingRepository, *a: Any, _n: str = name, _f: Any = real) -> Any:
            seen[_n] += 1
            return _f(self, *a)

        monkeypatch.setattr(EmbeddingRepository, name, spy)
    return seen


def test_an_append_reads_only_the_new_rows(db: Database, calls: dict[str, int]) -> None:
    _add(db, "ann", ["the red kite", "a blue boat"])
    cache = IndexCache(db.sessions)
    assert len(cache.get("ann", None).rows) == 2
    _add(db, "ann", ["a green lamp"], first=2)
    index = cache.get("ann", None)
    assert sorted(r.text for r in index.rows.values()) == [
        "a blue boat",
        "a green lamp",
        "the red kite",
    ]
    assert calls == {"count": 0, "live_ids": 0}


def test_a_deletion_is_found_by_the_removal_count(db: Database, calls: dict[str, int]) -> None:
    _add(db, "bob", ["one kite", "two boats", "three lamps"])
    cache = IndexCache(db.sessions)
    held = sorted(cache.get("bob", None).rows)
    _delete(db, "bob", held[:1])
    _add(db, "bob", ["four owls"], first=3)
    index = cache.get("bob", None)
    assert sorted(r.text for r in index.rows.values()) == ["four owls", "three lamps", "two boats"]
    assert calls == {"count": 0, "live_ids": 1}
    _add(db, "bob", ["five cats"], first=4)  # nothing removed since: an append again
    assert len(cache.get("bob", None).rows) == 4
    assert calls == {"count": 0, "live_ids": 1}


def test_removals_are_counted_per_user_in_the_deleting_transaction(db: Database) -> None:
    assert _state(db, "nobody") == IndexState(0, 0, 0)
    _add(db, "cat", ["a", "b", "c", "d"])
    _add(db, "dan", ["e"])
    with db.sessions() as session:
        ids = sorted(c.id for c in EmbeddingRepository(session, "cat").load())
    _delete(db, "cat", ids[:3])
    assert _state(db, "cat") == IndexState(2, 3, 2)
    assert _state(db, "dan") == IndexState(1, 0, 1)
    _delete(db, "cat", ids[:3])  # gone already: nothing is removed, nothing counted
    _delete(db, "cat", [])
    assert _state(db, "cat").removals == 3
    # A deletion that rolls back leaves the count as it was.
    with pytest.raises(RuntimeError), transaction(db.sessions) as session:
        EmbeddingRepository(session, "cat").delete_ids(ids[3:])
        raise RuntimeError("writer failed")
    assert _state(db, "cat").removals == 3


def test_deleting_all_of_a_users_rows_is_counted_and_leaves_others_alone(
    db: Database, calls: dict[str, int]
) -> None:
    _add(db, "fay", ["a kite", "a boat"])
    _add(db, "gus", ["a lamp"])
    cache = IndexCache(db.sessions)
    assert len(cache.get("fay", None).rows) == 2
    with transaction(db.sessions) as session:
        repo = EmbeddingRepository(session, "fay")
        repo.lock()
        repo.delete_all()
        repo.bump_generation()
    assert _state(db, "fay") == IndexState(2, 2, 2)
    assert cache.get("fay", None).rows == {}
    assert calls == {"count": 0, "live_ids": 1}  # found by the removal count
    assert [r.text for r in cache.get("gus", None).rows.values()] == ["a lamp"]
    assert _state(db, "gus") == IndexState(1, 0, 1)


def test_a_writer_that_does_not_count_deletions_is_still_seen(
    db: Database, calls: dict[str, int]
) -> None:
    """A replica of an earlier release (during a rolling upgrade) or a maintenance script
    deletes a row and bumps only the generation: the cache counts the user's rows."""
    _add(db, "eve", ["an old kite", "a new boat"])
    cache = IndexCache(db.sessions)
    held = sorted(cache.get("eve", None).rows)
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM memory_embeddings WHERE id = :id"), {"id": held[0]})
        conn.execute(text("UPDATE memory_index_state SET generation = generation + 1"))
    assert [r.text for r in cache.get("eve", None).rows.values()] == ["a new boat"]
    assert calls == {"count": 1, "live_ids": 1}
    _add(db, "eve", ["a third lamp"], first=2)  # counted again from here: an append
    assert len(cache.get("eve", None).rows) == 2
    assert calls == {"count": 1, "live_ids": 1}


def test_the_check_before_a_search_runs_outside_a_transaction(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every search first reads the user's generation: one statement in autocommit on the
    state reader's own pool (``retrieval.state_reader``), outside any transaction — no
    BEGIN and ROLLBACK round trips and no pre-ping around it — and nothing on the main
    pool. The REPEATABLE READ transaction is opened there only when there is something to
    load, and reads the state again in its own snapshot."""
    _add(db, "fay", ["a red kite"])
    cache = IndexCache(db.sessions)
    assert len(cache.get("fay", None).rows) == 1
    checks: list[tuple[bool, TransactionStatus]] = []
    loads: list[tuple[bool, IsolationLevel | None]] = []
    real_check, real_state = state_reader.read_state, EmbeddingRepository.state

    def check(cursor: Any, user_id: str) -> IndexState:
        checks.append((cursor.connection.autocommit, cursor.connection.info.transaction_status))
        return real_check(cursor, user_id)

    def state(self: EmbeddingRepository) -> IndexState:
        driver = self.session.connection().connection.driver_connection
        assert driver is not None
        loads.append((driver.autocommit, driver.isolation_level))
        return real_state(self)

    monkeypatch.setattr(state_reader, "read_state", check)
    monkeypatch.setattr(EmbeddingRepository, "state", state)
    with statements_on(db.engine) as main:
        assert len(cache.get("fay", None).rows) == 1
    assert checks == [(True, TransactionStatus.IDLE)]
    assert main == [] and loads == []
    _add(db, "fay", ["a blue boat"], first=1)
    checks.clear()
    assert len(cache.get("fay", None).rows) == 2
    assert checks == [(True, TransactionStatus.IDLE)]
    assert loads == [(False, IsolationLevel.REPEATABLE_READ)]


@contextmanager
def statements_on(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run through ``engine`` meanwhile."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def test_load_reads_every_column_as_the_orm_path_does(db: Database) -> None:
    """``load`` reads through the driver in the binary protocol and parses the JSON
    columns of all rows at once; each row must come back as the ORM read gives it —
    quotes, commas, brackets and non-ASCII in the ids, a nested context, SQL NULLs, a
    row without a vector."""
    odd_ids = ['a"b', "c,d", "[e]", "会话:1", "\\x", ""]
    context = {"chars": 12, "source_ids": ["prev,1", "前"], "nested": {"k": [1, None]}}
    chunks = [
        NewChunk(
            "sessions/s/0", 0, "first", content_hash("first"),
            datetime(2026, 1, 1, tzinfo=UTC), [0.5, -0.25, 1.0], "m", odd_ids, context,
        ),
        NewChunk("notes/x.md", 0, "second", content_hash("second"), None, None, None, None),
        NewChunk(
            "sessions/s/1", 0, "third", content_hash("third"),
            datetime(2026, 1, 2, tzinfo=UTC), [1.0, 2.0, 3.0], "m", [], {"chars": 0},
        ),
    ]  # fmt: skip
    insert_rows(db, "loader", chunks)
    with db.sessions() as session:
        repo = EmbeddingRepository(session, "loader")
        loaded = repo.load()
        paths = [c.file_path for c in chunks]
        expected = {c.id: c for c in repo.chunks_for_paths(paths, with_vectors=True)}
    assert [c.id for c in loaded] == sorted(expected)
    for got in loaded:
        want = expected[got.id]
        assert (got.file_path, got.chunk_index, got.chunk_text, got.created_at) == (
            want.file_path, want.chunk_index, want.chunk_text, want.created_at,
        )  # fmt: skip
        assert (got.content_hash, got.embedding_model, got.embedding_dim) == (
            want.content_hash, want.embedding_model, want.embedding_dim,
        )  # fmt: skip
        assert got.source_ids == want.source_ids
        assert got.context == want.context
        if want.vector is None:
            assert got.vector is None
        else:
            assert got.vector is not None
            assert got.vector.tolist() == want.vector.tolist()
        assert got.bm25_terms is not None
    by_path = {c.file_path: c for c in loaded}
    assert by_path["sessions/s/0"].source_ids == tuple(odd_ids)
    assert by_path["sessions/s/0"].context == context
    assert by_path["notes/x.md"].source_ids == () and by_path["notes/x.md"].context is None

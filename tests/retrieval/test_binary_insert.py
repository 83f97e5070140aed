"""New rows' vectors go to PostgreSQL in binary, in one statement for ``insert`` and
``insert_copies`` (retrieval.vector_binary): the stored rows are those the text paths
wrote, and the errors callers catch are the same SQLAlchemy exceptions.

The text paths as they were (an ORM insert, and the JSON statement with vectors as text)
are kept to compare against, in tests/retrieval/text_insert_paths.py. Real PostgreSQL +
pgvector throughout.
"""

from __future__ import annotations

import ctypes
import json
import math
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from pgvector.sqlalchemy import Vector
from sqlalchemy import Connection, cast, event, literal, select, text
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.database import Database
from memstrata.db.engine import make_engine, make_session_factory, transaction
from memstrata.db.models import MemoryEmbedding
from memstrata.errors import VectorDimensionError
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.vector_binary import VectorArray, float4s
from tests.retrieval.text_insert_paths import old_insert, old_insert_copies

Write = Callable[[Session], None]


# Whole rows as stored, in id order, ids as ranks (two users' rows get different ids), the
# vector as the md5 of its text. ``insert`` stored an absent list or context as JSON null,
# ``insert_copies`` as SQL NULL (as both do now): the two read back as None alike.
_ROWS = text(
    "SELECT file_path, chunk_index, chunk_text, content_hash, "
    "nullif(source_ids, 'null')::text, nullif(context, 'null')::text, bm25_terms, "
    "CASE WHEN created_at = inserted_at THEN 'now' ELSE created_at::text END, "
    "md5(embedding::text), embedding_model, embedding_dim, embedding_error, "
    "embedding_attempts, rank() OVER (ORDER BY id) FROM memory_embeddings WHERE user_id = :u "
    "ORDER BY id"
)


def stored(db: Database, user_id: str) -> list[tuple[Any, ...]]:
    with db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(_ROWS, {"u": user_id})]


def loaded(db: Database, user_id: str) -> list[tuple[Any, ...]]:
    """What the repository reads back, but ids and times (``stored`` compares those)."""
    with db.sessions() as session:
        found = EmbeddingRepository(session, user_id).load()
    return [
        (c.file_path, c.chunk_index, c.chunk_text, c.content_hash, c.embedding_model,
         c.embedding_dim, c.source_ids, c.context, c.bm25_terms,
         None if c.vector is None else c.vector.tobytes())
        for c in found
    ]  # fmt: skip


def halfway(rng: random.Random, n: int) -> list[float]:
    """float64s exactly halfway between two neighbouring float4s, of every magnitude."""
    out = []
    for _ in range(n):
        f = np.float32(rng.uniform(-1, 1) * 2.0 ** rng.randint(-140, 100))
        g = np.nextafter(f, np.float32(np.inf))
        out.append((float(f) + float(g)) / 2)
    return out


def test_float4s_rounds_as_postgresql_reads_the_decimal_form() -> None:
    """``float4s`` against the C library's ``strtof`` (what pgvector parses text with) of
    each float64's ``repr`` (what the text path sent): random floats, and floats exactly
    halfway between two float4s, where numpy's own rounding differs for about half."""
    libc = ctypes.CDLL(None)
    libc.strtof.restype = ctypes.c_float
    libc.strtof.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    rng = random.Random(5)
    values = np.asarray(
        [*halfway(rng, 20_000), *(rng.uniform(-1, 1) for _ in range(20_000)), 1 + 2.0**-24]
    )
    parsed = np.array([libc.strtof(repr(float(v)).encode(), None) for v in values], np.float32)
    assert float4s(values).tobytes() == parsed.tobytes()
    assert (values.astype(np.float32) != parsed).sum() > 5_000  # numpy alone: not the same


def vector(rng: random.Random, dim: int) -> list[float]:
    return [rng.uniform(-1.0, 1.0) for _ in range(dim)]


def mixed_chunks(prefix: str) -> list[NewChunk]:
    """Rows of every kind, rows with and without a time interleaved: vectors of two
    lengths and awkward floats, none, lists and contexts and neither, given terms."""
    rng = random.Random(7)
    at = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    # Tiny, zero, huge, repeating, subnormal; and floats halfway between two float4s
    odd = [1e-45, -0.0, 3.4e38, -1 / 3, 1e-8, 0.1, 2.0**-126, 3 * 2.0**-150] * 24
    odd += [1 + 2.0**-24, -(1 + 2.0**-24), 1 + 3 * 2.0**-24, -2.8839594e-05] * 48  # 384
    out = []
    for i in range(24):
        emb: list[float] | None = [vector(rng, 384), vector(rng, 1024), odd, None][i % 4]
        out.append(
            NewChunk(
                file_path=f"{prefix}/{i // 5}",
                chunk_index=i % 5,
                chunk_text=f'turn {i}: 用户说 café « naïve » "quoted" \\ {rng.random()}',
                content_hash=f"h{i}",
                created_at=at + timedelta(minutes=i) if i % 3 else None,
                embedding=emb,
                embedding_model=None if emb is None else "m-1",
                source_ids=[f"s{i}", f"t{i}"] if i % 2 else None,
                context={"chars": i, "source_ids": [f"p{i}"]} if i % 5 == 1 else None,
                bm25_terms="given terms" if i == 6 else None,
            )
        )
    return out


def test_insert_stores_the_rows_the_orm_insert_stored(db: Database) -> None:
    chunks = mixed_chunks("MEMORY.md")
    with transaction(db.sessions) as session:
        old_insert(session, "old", chunks)
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "new").insert(chunks)
    old, new = stored(db, "old"), stored(db, "new")
    assert len(new) == 24
    assert new == old  # the dated rows first, in input order, then the rest: same ids order
    assert [r[7] == "now" for r in new] == [False] * 16 + [True] * 8
    assert sum(r[8] is None for r in new) == 6
    assert loaded(db, "new") == loaded(db, "old")


def copies_of(sources: list[int], other_user_id: int) -> list[tuple[int | None, NewChunk]]:
    """Copies from the user's own rows, from another user's row, and plain new rows; input
    order is not key order."""
    rng = random.Random(3)
    rows: list[tuple[int | None, NewChunk]] = []
    for i in range(12):
        emb = vector(rng, 384) if i % 4 == 1 else None  # a new row's own, or none
        chunk = NewChunk("sessions/a", 11 - i, f"text {i}", f"c{i}",
                         datetime(2024, 1, 2, tzinfo=UTC) if i % 3 == 0 else None, emb,
                         None if emb is None else "m-1", [f"a{i}"])  # fmt: skip
        rows.append(([sources[i % 3], None, other_user_id, None][i % 4], chunk))
    return rows


def source_rows(db: Database, user_id: str) -> list[int]:
    rng = random.Random(11)
    chunks = [
        NewChunk("MEMORY.md", i, f"src {i}", f"s{i}", embedding=vector(rng, 384 if i else 1024),
                 embedding_model="m-0")
        for i in range(3)
    ]  # fmt: skip
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, user_id).insert(chunks)
    with db.sessions() as session:
        return sorted(c.id for c in EmbeddingRepository(session, user_id).load())


def test_insert_copies_stores_the_rows_the_text_statement_stored(db: Database) -> None:
    old_sources, new_sources = source_rows(db, "old"), source_rows(db, "new")
    stranger = source_rows(db, "stranger")[0]
    with transaction(db.sessions) as session:
        old_insert_copies(session, "old", copies_of(old_sources, stranger))
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "new").insert_copies(copies_of(new_sources, stranger))
    old, new = stored(db, "old"), stored(db, "new")
    assert new == old
    copies = new[3:]
    assert [r[1] for r in copies] == list(range(11, -1, -1))  # ids in input order
    by_source = {i: stored(db, "new")[n][8] for n, i in enumerate(new_sources)}
    for i, row in enumerate(copies):
        if i % 4 == 0:  # copied in the database: the source's vector, model and length
            assert row[8:11] == (by_source[new_sources[i % 3]], "m-0", 384 if i % 3 else 1024)
        else:  # a row's own vector, or none: another user's row is no source
            assert (row[8] is None) == (i % 4 != 1)
            assert row[9:11] == ((None, None) if i % 4 != 1 else ("m-1", 384))
    assert loaded(db, "new") == loaded(db, "old")
    assert len(stored(db, "stranger")) == 3


@pytest.fixture
def statements(db: Database) -> Iterator[list[tuple[str, Any]]]:
    """Every statement run on the engine, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def note(conn: Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    event.listen(db.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", note)


def test_one_statement_with_the_vectors_in_binary_and_the_oid_read_once(
    db: Database, statements: list[tuple[str, Any]]
) -> None:
    rng = random.Random(1)
    chunks = [
        NewChunk("MEMORY.md", i, f"t{i}", f"h{i}", embedding=vector(rng, 384), embedding_model="m",
                 created_at=datetime(2024, 1, 1, tzinfo=UTC) if i % 2 else None)
        for i in range(12)
    ]  # fmt: skip
    db.engine.dispose()  # new connections: none has read the oid yet
    backends = set()
    for part in range(2):
        with transaction(db.sessions) as session:
            repo = EmbeddingRepository(session, "u")
            repo.insert(chunks[part * 6 : part * 6 + 3])
            repo.insert(chunks[part * 6 + 3 : part * 6 + 6])
            backends.add(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
    inserts = [p for s, p in statements if s.startswith("INSERT INTO memory_embeddings")]
    assert len(inserts) == 4  # dated and undated rows in one statement
    for params in inserts:
        assert isinstance(params["vecs"], VectorArray) and params["vecs"].count == 3
        for row in json.loads(params["rows"]):  # no vector in the JSON, as text or otherwise
            assert "embedding" not in row and row["embedding_dim"] == 384
    lookups = [s for s, _ in statements if "regtype" in s]
    assert len(lookups) == len(backends)  # once per connection, not per insert
    assert len(stored(db, "u")) == 12


def test_rows_without_vectors_store_null_and_send_no_vector(
    db: Database, statements: list[tuple[str, Any]]
) -> None:
    chunks = [NewChunk("sessions/x/0", i, f"t{i}", f"h{i}") for i in range(3)]
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "u").insert(chunks)
    assert [r[8:11] for r in stored(db, "u")] == [(None, None, None)] * 3
    assert [p["vecs"] for s, p in statements if s.startswith("INSERT")] == [None]
    assert not [s for s, _ in statements if "regtype" in s]  # no vector, no oid needed


def test_a_unique_violation_is_the_same_integrity_error(db: Database) -> None:
    row = NewChunk("MEMORY.md", 0, "a", "h", embedding=[0.5] * 384, embedding_model="m")
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "u").insert([row])
    writes: tuple[Write, ...] = (
        lambda s: old_insert(s, "u", [row]),
        lambda s: old_insert_copies(s, "u", [(None, row)]),
        lambda s: EmbeddingRepository(s, "u").insert([row]),
        lambda s: EmbeddingRepository(s, "u").insert_copies([(None, row)]),
    )
    for write in writes:
        with pytest.raises(IntegrityError) as caught, transaction(db.sessions) as session:
            write(session)
        assert getattr(caught.value.orig, "sqlstate", None) == "23505"
    assert len(stored(db, "u")) == 1


@contextmanager
def one_connection(db: Database) -> Iterator[tuple[sessionmaker[Session], list[str]]]:
    """Sessions of an engine with one pooled connection to ``db``'s database (so that every
    transaction is on the same slot), and the vector type's oid lookups (``regtype``) its
    connections sent; the engine is disposed after."""
    engine = make_engine(db.engine.url.render_as_string(hide_password=False), pool_size=1)
    lookups: list[str] = []
    event.listen(
        engine,
        "before_cursor_execute",
        lambda *a: lookups.append(a[2]) if "regtype" in a[2] else None,
    )
    try:
        yield make_session_factory(engine), lookups
    finally:
        engine.dispose()


def test_a_lost_connection_is_an_operational_error_and_the_next_one_works(
    db: Database,
) -> None:
    """The insert on a connection whose server process is gone fails as SQLAlchemy's
    ``OperationalError`` (the API's 503), as the text paths did; the pool replaces the
    connection, and the new one reads the oid again. One pooled connection, so that
    every transaction here is on it."""
    row = NewChunk("MEMORY.md", 0, "a", "h", embedding=[0.25] * 384, embedding_model="m")
    other = NewChunk("MEMORY.md", 1, "b", "h2", embedding=[1.0] * 8)
    with one_connection(db) as (sessions, lookups):
        writes: tuple[Write, ...] = (
            lambda s: old_insert(s, "u", [other]),
            lambda s: EmbeddingRepository(s, "u").insert([other]),
        )
        for write in writes:
            with pytest.raises(OperationalError), transaction(sessions) as session:
                EmbeddingRepository(session, "u").insert([row])  # the oid is read first
                pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
                with db.engine.connect() as killer:
                    killer.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                write(session)
        with transaction(sessions) as session:
            EmbeddingRepository(session, "u").insert([row])
    assert len(lookups) == 3  # each of the three connections read it once
    assert [r[8] is not None for r in stored(db, "u")] == [True]


def test_vectors_are_checked_as_before(db: Database) -> None:
    """A vector ``pad_vector`` refuses raises its error before anything is sent; a float
    beyond float4's range is PostgreSQL's ``DataError`` on either path."""
    bad: list[tuple[list[Any], type[Exception]]] = [
        ([0.1] * 2561, VectorDimensionError),
        ([], VectorDimensionError),
        ([0.1, math.nan], VectorDimensionError),
        ([0.1, math.inf], VectorDimensionError),
        ([0.1, None], TypeError),
        ([0.1, 1e39], DataError),
    ]
    for values, error in bad:
        row = NewChunk("MEMORY.md", 0, "a", "h", embedding=values, embedding_model="m")
        messages = []
        for new in (False, True):
            with pytest.raises(error) as caught, transaction(db.sessions) as session:
                if new:
                    EmbeddingRepository(session, "u").insert([row])
                else:
                    old_insert(session, "u", [row])
            messages.append(str(caught.value).split("\n")[0])
        if error is not DataError:  # the server's message names its input
            assert messages[0] == messages[1]
    assert stored(db, "u") == []


def test_other_statements_still_read_vectors_as_before(db: Database) -> None:
    """The dumper is for ``VectorArray`` values only: on a connection that sent one, a
    vector read or written through pgvector's SQLAlchemy type is what it is on a
    connection of an engine that never sent one."""
    row = NewChunk("MEMORY.md", 0, "a", "h", embedding=[0.5, -1.5, 2.0], embedding_model="m")
    probe = text("SELECT cast('[1,2.5]' AS vector)")
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "u").insert([row])
        read = session.execute(select(MemoryEmbedding.embedding)).scalar_one()
        typed = session.execute(select(cast(literal([1.0, 2.5]), Vector(2)))).scalar_one()
        again = session.execute(probe).scalar_one()
        near = EmbeddingRepository(session, "u").nearest([0.5, -1.5, 2.0], "m", 1)
    plain = make_engine(db.engine.url.render_as_string(hide_password=False), pool_size=1)
    try:
        with plain.connect() as conn:
            assert conn.execute(select(MemoryEmbedding.embedding)).scalar_one() == read
            assert conn.execute(select(cast(literal([1.0, 2.5]), Vector(2)))).scalar_one() == typed
            assert conn.execute(probe).scalar_one() == again == "[1,2.5]"
    finally:
        plain.dispose()
    assert list(read[:3]) == [0.5, -1.5, 2.0] and len(read) == 2560
    assert near[0][1] == pytest.approx(1.0)


def test_replace_vectors_writes_through_the_binary_statement(
    db: Database, statements: list[tuple[str, Any]]
) -> None:
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "u").insert([NewChunk("sessions/s/0", 0, "a", "h")])
    with db.sessions() as session:
        (c,) = EmbeddingRepository(session, "u").load()
    statements.clear()
    with transaction(db.sessions) as session:
        repo = EmbeddingRepository(session, "u")
        repo.lock()
        assert repo.replace_vectors({c.id: [0.125] * 384}, "m-2") == 1
    (params,) = [p for s, p in statements if s.startswith("INSERT INTO memory_embeddings")]
    assert isinstance(params["vecs"], VectorArray)
    (after,) = stored(db, "u")
    assert after[9:11] == ("m-2", 384)

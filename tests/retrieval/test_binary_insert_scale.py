"""The binary insert at scale and across databases: the ``vector[]`` parameter of a large
write is built in place (its memory about the parameter's size, not several times it), a
write of 5,000 rows is one statement that stores them all, and two engines on two
databases, where ``vector`` has two different oids, each send their own. Real PostgreSQL
+ pgvector."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.vector_binary import native_floats, vector_array
from tests.retrieval.test_binary_insert import one_connection


@pytest.mark.parametrize("dim", [384, 2560])
def test_the_parameter_of_5000_rows_is_built_in_about_its_own_size(dim: int) -> None:
    rng = np.random.default_rng(dim)
    vectors = [native_floats(rng.standard_normal(dim).tolist()) for _ in range(5_000)]
    tracemalloc.start()
    try:
        built = vector_array(vectors, 12345)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = len(built.data)  # 5,000 padded vectors: 51 MB
    # It was built apart, joined to its head (a copy) and rounded in one go over every
    # row: 3.2 times its size at 384 dimensions, 9.2 times (474 MB) at 2560.
    assert peak < 1.6 * size, (peak, size)


def test_5000_rows_in_one_write_are_stored_in_order(db: Database) -> None:
    rng = np.random.default_rng(5)
    rows = [
        NewChunk("MEMORY.md", i, f"row {i}", f"h{i}", embedding=v, embedding_model="m")
        for i, v in enumerate(rng.standard_normal((5_000, 384)).tolist())
    ]
    with transaction(db.sessions) as session:
        EmbeddingRepository(session, "u").insert(rows)
    with db.engine.connect() as conn:
        got = conn.execute(
            text(
                "SELECT chunk_index, embedding_dim, embedding::text FROM memory_embeddings "
                "WHERE user_id = 'u' ORDER BY id"
            )
        ).all()
    assert [(r[0], r[1]) for r in got] == [(i, 384) for i in range(5_000)]
    for i in (0, 2_499, 4_999):
        stored = np.array(got[i][2].strip("[]").split(","), dtype=np.float32)
        assert np.array_equal(stored[:384], np.array(rows[i].embedding, dtype=np.float32))
        assert not stored[384:].any()


@pytest.fixture
def second(db: Database, tmp_path: Path) -> Iterator[Database]:
    """A second database on the same server, where ``vector`` was created after another
    type, so its oid is not the first database's."""
    name = "memstrata_review_second"
    admin_url = db.engine.url.set(database="postgres")
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = admin_url.set(database=name)
    setup = create_engine(url)
    with setup.begin() as conn:
        conn.execute(text("CREATE TYPE shifts_the_oid AS (a int)"))
        conn.execute(text("CREATE EXTENSION vector"))
    setup.dispose()
    opened = Database.open(
        Settings(
            environment="test",
            database_url=url.render_as_string(hide_password=False),
            data_dir=tmp_path / "data",
        )
    )
    yield opened
    opened.close()
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def vector_oid_of(database: Database) -> int:
    with database.engine.connect() as conn:
        return int(conn.execute(text("SELECT 'vector'::regtype::oid")).scalar_one())


def test_two_databases_with_two_vector_oids_each_get_their_own(
    db: Database, second: Database
) -> None:
    assert vector_oid_of(db) != vector_oid_of(second)
    for round_ in range(3):  # interleaved: each pooled connection keeps its own oid
        for n, database in enumerate((db, second)):
            row = NewChunk(
                "MEMORY.md",
                round_,
                "a",
                f"h{round_}",
                embedding=[float(n + 1), 0.5, -round_],
                embedding_model="m",
            )
            with transaction(database.sessions) as session:
                EmbeddingRepository(session, "u").insert([row])
    for n, database in enumerate((db, second)):
        with database.engine.connect() as conn:
            got = conn.execute(
                text(
                    "SELECT chunk_index, subvector(embedding, 1, 3)::text FROM "
                    "memory_embeddings WHERE user_id = 'u' ORDER BY id"
                )
            ).all()
        assert got == [(r, f"[{n + 1},0.5,{-r}]") for r in range(3)]


def test_a_connection_replaced_between_writes_reads_the_oid_again(db: Database) -> None:
    """A server process ended between two writes: the pool's ping at checkout finds it
    gone and connects again, with an empty ``Connection.info``, so the new connection
    reads the oid and registers the dumper itself (a stale cache would send the array with
    no dumper: "cannot adapt type 'VectorArray'"). One pooled connection: the same slot."""
    pids = []
    with one_connection(db) as (sessions, lookups):
        for n in range(3):
            row = NewChunk("MEMORY.md", n, "a", f"h{n}", embedding=[0.5, n], embedding_model="m")
            with transaction(sessions) as session:
                EmbeddingRepository(session, "u").insert([row])
                pids.append(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
            if n < 2:
                with db.engine.connect() as killer:
                    killer.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pids[-1]})
    assert len(set(pids)) == 3 and len(lookups) == 3
    with db.engine.connect() as conn:
        got = conn.execute(
            text(
                "SELECT subvector(embedding, 1, 2)::text FROM memory_embeddings "
                "WHERE user_id = 'u' ORDER BY id"
            )
        ).scalars()
        assert list(got) == ["[0.5,0]", "[0.5,1]", "[0.5,2]"]

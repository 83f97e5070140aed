"""Index snapshots, their parts that need no index: the BM25 arrays, the encoding and its
refusals, when to write, the unlogged table, only conversation rows, a write waiting for
loads to settle."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval import snapshot
from memstrata.retrieval.bm25_index import BM25Index
from memstrata.retrieval.rows import Row

# -- pure parts ----------------------------------------------------------------------------


def test_bm25_arrays_round_trip_and_stay_incremental() -> None:
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)] + ["茶", "乌龙"]
    docs = [(k, [words[j] for j in rng.integers(0, len(words), 12)]) for k in range(100)]
    original: BM25Index[int] = BM25Index()
    original.add_many(docs)
    original.remove(7)
    copy = BM25Index.from_arrays(original.to_arrays())
    for index in (original, copy):
        index.remove(11)
        index.add(500, ["w1", "w2", "茶"])
    for q in (["w1"], ["w3", "w3", "w9"], ["茶", "乌龙"], ["absent"]):
        assert copy.top_n(q, 20) == original.top_n(q, 20)
    assert copy.terms_of(12) == original.terms_of(12)


def test_a_bulk_loaded_index_exports_its_frozen_postings_as_they_are() -> None:
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(30)] + ["茶"]
    docs = [(k, [words[j] for j in rng.integers(0, len(words), 8)]) for k in range(200)]
    bulk: BM25Index[int] = BM25Index()
    bulk.add_many(docs)  # an empty index: postings stay one frozen block
    one: BM25Index[int] = BM25Index()
    for key, tokens in docs:
        one.add(key, tokens)
    from_bulk, from_one = bulk.to_arrays(), one.to_arrays()
    assert bulk.term_count() == len(from_bulk.terms) == len(from_one.terms)
    assert sorted(from_bulk.terms) == sorted(from_one.terms)
    assert from_bulk.doc_terms == from_one.doc_terms
    copy = BM25Index.from_arrays(from_bulk)
    for q in (["w1"], ["w2", "w9", "w9"], ["茶"], ["absent"]):
        assert copy.top_n(q, 50) == one.top_n(q, 50) == bulk.top_n(q, 50)


def test_encode_decode_round_trip() -> None:
    rows = [
        Row(3, "sessions/a/0", 0, "hello 世界", 1.5, "conversation", ("a/0",), "m"),
        # The previous round's tail, kept so that a hit from a snapshot says it too.
        Row(9, "sessions/a/1", None, "hello\nbye", 2.5, "conversation", (), None, 6),
    ]
    vectors = np.array([[0.6, 0.8]], dtype=np.float32)
    payload = snapshot.encode(rows, [["hello", "世", "界"], ["hello", "bye"]], [3], vectors)
    got = snapshot.decode(payload, max_id=9)
    assert got.rows == rows and got.max_id == 9
    assert got.vector_ids == [3] and np.array_equal(got.vectors, vectors)
    assert BM25Index.from_arrays(got.bm25).top_n(["世"], 5)[0][0] == 3


@pytest.mark.parametrize("payload", [b"", b"garbage", b"PK\x03\x04broken zip"])
def test_garbage_payloads_raise_snapshot_error(payload: bytes) -> None:
    with pytest.raises(snapshot.SnapshotError):
        snapshot.decode(payload, max_id=1)


def test_a_string_with_nul_cannot_be_encoded() -> None:
    row = Row(1, "sessions/a/0", 0, "bad\x00text", 1.0, "conversation", (), None)
    with pytest.raises(ValueError, match="NUL"):
        snapshot.encode([row], [["bad"]], [], np.zeros((0, 0), np.float32))


def test_should_write() -> None:
    assert snapshot.should_write(1000, 1000)
    assert not snapshot.should_write(999, 1000)
    assert not snapshot.should_write(10**6, 0)


def test_the_snapshot_table_skips_the_write_ahead_log(db: Database) -> None:
    with db.engine.connect() as conn:
        persistence = conn.execute(
            text("SELECT relpersistence FROM pg_class WHERE relname = 'memory_index_snapshots'")
        ).scalar()
    assert persistence == "u"  # UNLOGGED: derived data, rebuilt from the rows after a crash


def test_only_conversation_rows_go_into_a_snapshot() -> None:
    row = Row(1, "memory/MEMORY.md", 0, "x", 1.0, "memory", (), None)
    with pytest.raises(ValueError, match="conversation"):
        snapshot.encode([row], [["x"]], [], np.zeros((0, 0), np.float32))


def test_a_write_waits_until_loads_have_settled(db: Database) -> None:
    writer = snapshot.SnapshotWriter(db.sessions, 1, settle_s=0.3)
    ran: list[float] = []

    def export() -> snapshot.Export | None:
        ran.append(time.monotonic())
        return None  # nothing to write

    with writer.loading():
        writer.schedule("settle-user", None, export)
        time.sleep(0.5)
        assert ran == []  # a load is running
        ended = time.monotonic()
    assert writer.idle(timeout=5)
    assert ran and ran[0] - ended >= 0.3
    writer.close()

"""The per-process search cache stays within its byte budget, evicting by user (LRU).

Rows are written through the real repository into the real database and read back by the
cache. Their vectors are random unit vectors of the local model's length (384): memory
depends on sizes, not meaning, and embedding them would only make the test slow. The
accounting itself is checked against tracemalloc.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import snapshot
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.records import IndexState, NewChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import format_round
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.staging import content_hash
from memstrata.retrieval.user_index import UserIndex

from .stored import insert_rows

MODEL = "test-random-384"
WORDS = [
    "lake",
    "hiking",
    "camera",
    "violin",
    "pottery",
    "marathon",
    "garden",
    "puppy",
    "novel",
    "recipe",
    "paint",
    "museum",
    "guitar",
    "beach",
    "festival",
    "orchard",
    "telescope",
    "chess",
    "kayak",
    "lantern",
]


def _write(db: Database, user: str, n: int, seed: int, first: int = 0) -> None:
    rng = np.random.default_rng(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    chunks = []
    for i in range(first, first + n):
        a, b, c = (WORDS[(seed * 7 + i * k) % len(WORDS)] for k in (1, 3, 5))
        body = format_round(
            f"Yesterday I talked about the {a} and the {b}, round {i} of {seed}.",
            f"Noted: {c} matters to you ({seed}-{i}).",
        )
        vector = rng.standard_normal(384).astype(np.float32)
        chunks.append(
            NewChunk(
                f"sessions/s{seed}/{i}",
                0,
                body,
                content_hash(body),
                start + timedelta(hours=i),
                (vector / np.linalg.norm(vector)).tolist(),
                MODEL,
                [f"s{seed}:{i}"],
            )
        )
    insert_rows(db, user, chunks)


@pytest.fixture
def seeded(db: Database) -> Database:
    for u in range(5):
        _write(db, f"user{u}", 40, u)
    return db


def _one_user_bytes(db: Database, model: str) -> int:
    cache = IndexCache(db.sessions)
    cache.get("user0", model)
    return cache.stats().bytes


def test_bytes_stay_within_the_budget_and_lru_users_go(seeded: Database) -> None:
    one = _one_user_bytes(seeded, MODEL)
    assert one > 0
    budget = int(one * 2.5)  # room for two of these users, not three
    cache = IndexCache(seeded.sessions, max_users=256, max_bytes=budget)
    for u in range(5):
        cache.get(f"user{u}", MODEL)
        stats = cache.stats()
        assert stats.bytes <= budget, stats
    stats = cache.stats()
    assert (stats.users, stats.misses, stats.hits, stats.evictions) == (2, 5, 0, 3)
    # The two most recently searched are held; a held one is a hit and stays...
    cache.get("user4", MODEL)
    assert cache.stats().hits == 1
    assert cache.stats().evictions == 3
    # ... an evicted one is a miss, evicts the least recently used (user3), and is whole.
    index = cache.get("user0", MODEL)
    assert len(index.rows) == 40 and index.vectors is not None and len(index.vectors) == 40
    stats = cache.stats()
    assert (stats.users, stats.misses, stats.evictions) == (2, 6, 4)
    assert stats.bytes <= budget
    assert {k[0] for k in cache._entries} == {"user4", "user0"}


def test_a_user_larger_than_the_budget_is_still_served(seeded: Database) -> None:
    cache = IndexCache(seeded.sessions, max_bytes=1024)
    search = SearchService(cache)  # BM25 only: the cache is keyed by (user, no model)
    assert search.search("user1", "garden", top_k=2).hits
    assert cache.stats().users == 1
    assert search.search("user2", "garden", top_k=2).hits
    stats = cache.stats()
    assert (stats.users, stats.evictions) == (1, 1)


def test_writes_update_the_accounting(seeded: Database) -> None:
    cache = IndexCache(seeded.sessions)
    cache.get("user0", MODEL)
    before = cache.stats().bytes
    _write(seeded, "user0", 40, 0, first=40)
    cache.get("user0", MODEL)
    after = cache.stats().bytes
    assert after > before * 1.5


def test_the_estimate_is_above_the_heap_the_index_holds(seeded: Database) -> None:
    """The Python heap is a floor of the estimate, whose figures add what a process was
    measured to keep resident beyond it (checked against RSS in test_cache_memory)."""
    _write(seeded, "big", 300, 9)
    cache = IndexCache(seeded.sessions)
    with seeded.sessions() as session:
        chunks = EmbeddingRepository(session, "big").load()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = UserIndex("big", MODEL)
    index.apply(chunks, [])
    del chunks  # the index keeps what it needs (texts included); the rest is garbage
    gc.collect()
    measured = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    estimate = index.approx_bytes()
    assert measured <= estimate, (measured, estimate)
    assert cache.max_bytes is None


def _recounted(index: UserIndex) -> int:
    """``approx_bytes`` summed over every held text from scratch (the running total
    replaced this recount at every refresh)."""
    from memstrata.retrieval import user_index

    vectors = index.vectors.nbytes() if index.vectors is not None else 0
    return (
        user_index.INDEX_BYTES
        + sum(sys.getsizeof(r.text) for r in index.rows.values())
        + vectors
        + user_index.ROW_BYTES * len(index.rows)
        + user_index.POSTING_BYTES * index.bm25.posting_count()
        + user_index.TERM_BYTES * index.bm25.term_count()
    )


def test_the_estimate_follows_rows_that_come_and_go(seeded: Database) -> None:
    _write(seeded, "churn", 120, 5)
    with seeded.sessions() as session:
        chunks = EmbeddingRepository(session, "churn").load()
    index = UserIndex("churn", MODEL)
    index.apply(chunks[:80], [])
    assert index.approx_bytes() == _recounted(index) > 0
    # Rows removed, rows added, a row applied again under its own id (replaced in place).
    index.apply(chunks[80:], [c.id for c in chunks[:30]])
    index.apply(chunks[40:41], [])
    assert index.approx_bytes() == _recounted(index)
    exported = index.export()
    assert exported is None  # never loaded through the cache: generation < 0
    index.state = IndexState(1, 0, 1)  # as if the cache had loaded it
    exported = index.export()
    assert exported is not None
    payload = snapshot.encode(exported.rows, exported.terms, exported.vector_ids, exported.vectors)
    seeded_index = UserIndex("churn", MODEL)
    seeded_index.seed(snapshot.decode(payload, exported.max_id))
    assert seeded_index.approx_bytes() == _recounted(seeded_index)
    seeded_index.apply([], list(seeded_index.rows)[:10])
    assert seeded_index.approx_bytes() == _recounted(seeded_index)
    seeded_index.reset()
    assert seeded_index.approx_bytes() == _recounted(seeded_index)


def test_live_ids_are_exactly_the_users_rows(seeded: Database) -> None:
    _write(seeded, "ids-a", 25, 6)
    _write(seeded, "ids-b", 5, 7)
    with seeded.sessions() as session:
        a = EmbeddingRepository(session, "ids-a")
        held = {c.id for c in a.load()}
        assert a.live_ids() == held and len(held) == 25
        assert EmbeddingRepository(session, "nobody").live_ids() == set()
    with transaction(seeded.sessions) as session:
        EmbeddingRepository(session, "ids-a").delete_ids(sorted(held)[:7])
    with seeded.sessions() as session:
        assert EmbeddingRepository(session, "ids-a").live_ids() == set(sorted(held)[7:])

"""Index snapshots: a cold load from one stored value answers exactly like a load of every
row, heals what changed since, and never keeps a deleted turn's text."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from memstrata.bench.harness import clear_user
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.retrieval import snapshot
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.search import SearchService
from memstrata.runtime import Memstrata

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


USER = "snap-user"


QUERIES = [
    "Which pet did I adopt?",
    "where does my sister live",
    "marathon training plan",
    "乌龙茶",
    "what did I say about the garden",
]


TURNS = [
    "I adopted a golden retriever puppy named Biscuit.",
    "My sister lives in Lisbon and works as an architect.",
    "我最喜欢的饮料是乌龙茶。",
    "I'm training for the Berlin marathon in September.",
    "The tomatoes in my garden finally turned red.",
    "I started learning the cello last winter.",
]


def seed(indexer: Indexer, sessions: int = 3, first: int = 0) -> None:
    for s in range(first, first + sessions):
        for i, turn in enumerate(TURNS):
            when = NOW - timedelta(days=40 - s, minutes=i)
            indexer.index_turn(USER, f"s{s}", i, f"{turn} (session {s})", "Noted.", when)


def searcher(
    db: Database, embedder: OpenAICompatibleEmbedder, min_rows: int | None
) -> SearchService:
    writer = (
        None if min_rows is None else snapshot.SnapshotWriter(db.sessions, min_rows, settle_s=0)
    )
    return SearchService(IndexCache(db.sessions, snapshots=writer), embedder, decay=DecayPolicy())


def answers(search: SearchService) -> list[list[tuple[str, float]]]:
    return [
        [(h.text, round(h.score, 12)) for h in search.search(USER, q, top_k=8, as_of=NOW).hits]
        for q in QUERIES
    ]


def stored(db: Database) -> list[tuple[str, str, int, int]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT model, format, max_id, row_count FROM memory_index_snapshots")
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def write_snapshot(db: Database, embedder: OpenAICompatibleEmbedder) -> SearchService:
    search = searcher(db, embedder, min_rows=5)
    search.search(USER, QUERIES[0], as_of=NOW)
    writer = search.cache.snapshots
    assert writer is not None and writer.idle() and writer.written == 1
    assert search.cache.stats().snapshot_writes == 1
    return search


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The keyword arguments of every ``EmbeddingRepository.load`` call."""
    calls: list[dict[str, object]] = []
    real = EmbeddingRepository.load

    def load(self: EmbeddingRepository, *args: object, **kw: object) -> object:
        calls.append({"args": args, **kw})
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(EmbeddingRepository, "load", load)
    return calls


def test_a_cold_load_from_the_snapshot_answers_like_a_load_of_every_row(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    loads: list[dict[str, object]],
) -> None:
    seed(indexer)
    indexer.index_memory_file(USER, FileKind.MEMORY, "# Memory\n\nThe user keeps bees.\n")
    write_snapshot(db, embedder)
    ((model, fmt, max_id, count),) = stored(db)
    assert (model, fmt, count) == (embedder.name, snapshot.format_key(), 3 * len(TURNS))
    # After the snapshot: new turns and a rewritten memory file.
    seed(indexer, sessions=1, first=3)
    indexer.index_memory_file(USER, FileKind.MEMORY, "# Memory\n\nThe user keeps goats.\n")
    assert stored(db)[0][2] == max_id  # nothing of that touched the snapshot

    loads.clear()
    seeded = searcher(db, embedder, min_rows=5)
    from_snapshot = answers(seeded)
    assert loads[0]["after_id"] == max_id and loads[0]["files_too"] is True
    assert seeded.cache.stats().snapshot_loads == 1
    loads.clear()
    from_rows = answers(searcher(db, embedder, min_rows=None))
    assert loads[0] == {"args": ()}  # every row
    assert from_snapshot == from_rows
    texts = [t for hits in from_rows for t, _ in hits]
    assert any("goats" in t for t in texts) and not any("bees" in t for t in texts)
    assert any("(session 3)" in t for t in texts)


def test_the_seeded_index_equals_a_full_one_row_by_row(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer)
    write_snapshot(db, embedder)
    seed(indexer, sessions=1, first=3)
    seeded = IndexCache(db.sessions, snapshots=snapshot.SnapshotWriter(db.sessions, 5, settle_s=0))
    full = IndexCache(db.sessions)
    a, b = seeded.get(USER, embedder.name), full.get(USER, embedder.name)
    assert a.rows == b.rows
    assert a.vectors is not None and b.vectors is not None
    keys = sorted(b.rows)
    assert np.array_equal(a.vectors.unit_rows(keys), b.vectors.unit_rows(keys))
    for q in ["biscuit puppy", "lisbon architect", "乌龙", "session", "nothing-matches"]:
        terms = q.split()
        assert a.bm25.top_n(terms, 50) == b.bm25.top_n(terms, 50)


def test_deleting_a_conversation_row_drops_the_snapshot_and_a_file_rewrite_does_not(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer)
    indexer.index_memory_file(USER, FileKind.MEMORY, "# Memory\n\nThe user keeps bees.\n")
    write_snapshot(db, embedder)
    indexer.index_memory_file(USER, FileKind.MEMORY, "# Memory\n\nThe user keeps goats.\n")
    assert len(stored(db)) == 1
    # The same turn sent again with other text: its old row (and text) is deleted.
    indexer.index_turn(USER, "s0", 0, "I adopted a cat instead.", "Noted.", NOW)
    assert stored(db) == []
    search = searcher(db, embedder, min_rows=None)
    hits = search.search(USER, "golden retriever Biscuit", top_k=20, as_of=NOW).hits
    assert not any("Biscuit. (session 0)" in h.text for h in hits)


def test_a_benchmark_starting_a_user_afresh_drops_their_snapshot(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    open_runtime: Callable[..., Memstrata],
) -> None:
    seed(indexer)
    search = write_snapshot(db, embedder)
    clear_user(open_runtime(), USER)
    assert stored(db) == []  # no turn's text outlives its row
    assert search.search(USER, QUERIES[0], as_of=NOW).hits == []


def test_a_cold_load_that_fails_after_seeding_leaves_nothing_behind(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed(indexer)
    write_snapshot(db, embedder)
    cache = IndexCache(db.sessions, snapshots=snapshot.SnapshotWriter(db.sessions, 5, settle_s=0))
    real = EmbeddingRepository.load

    def lost(self: EmbeddingRepository, *args: object, **kw: object) -> object:
        raise OperationalError("SELECT", None, ConnectionError("server closed the connection"))

    monkeypatch.setattr(EmbeddingRepository, "load", lost)  # fails after the seeding
    with pytest.raises(OperationalError):
        cache.get(USER, embedder.name)
    monkeypatch.setattr(EmbeddingRepository, "load", real)
    # Meanwhile a turn is sent again with other text: its old row and the snapshot go.
    indexer.index_turn(USER, "s0", 0, "I adopted a cat instead.", "Noted.", NOW)
    assert stored(db) == []
    held = cache.get(USER, embedder.name)
    assert held.rows == IndexCache(db.sessions).get(USER, embedder.name).rows
    assert not any("Biscuit. (session 0)" in r.text for r in held.rows.values())


def test_a_snapshot_is_not_stored_when_a_row_in_it_is_gone(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer)
    cache = IndexCache(db.sessions)
    index = cache.get(USER, embedder.name)
    with index.lock:
        taken = index.export()
    assert taken is not None and len(taken.rows) == 3 * len(TURNS)
    indexer.index_turn(USER, "s1", 2, "I changed my mind about tea.", "Noted.", NOW)
    writer = snapshot.SnapshotWriter(db.sessions, 5)
    writer._write(lambda: taken)
    assert stored(db) == [] and writer.written == 0


def test_an_unreadable_snapshot_is_logged_and_the_rows_are_loaded(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed(indexer)
    expected = answers(write_snapshot(db, embedder))
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE memory_index_snapshots SET payload = 'not a snapshot'"))
    with caplog.at_level(logging.WARNING, logger="memstrata.retrieval.cache"):
        search = searcher(db, embedder, min_rows=5)
        assert answers(search) == expected
    assert search.cache.stats().snapshot_errors == 1
    assert search.cache.stats().snapshot_loads == 0
    (record,) = [r for r in caplog.records if r.getMessage() == "index.snapshot.unreadable"]
    assert event_fields(record)["user_id"] == USER
    assert "SnapshotError" in event_fields(record)["error"]
    # The fallback load was a full one, so a good snapshot replaces the bad one.
    assert search.cache.snapshots is not None and search.cache.snapshots.idle()
    assert stored(db)[0][3] == 3 * len(TURNS)
    assert answers(searcher(db, embedder, min_rows=5)) == expected


def test_a_snapshot_made_under_other_rules_is_ignored_and_replaced(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    loads: list[dict[str, object]],
) -> None:
    seed(indexer)
    expected = answers(write_snapshot(db, embedder))
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE memory_index_snapshots SET format = '0.1u'"))
    loads.clear()
    search = searcher(db, embedder, min_rows=5)
    assert answers(search) == expected
    assert loads[0] == {"args": ()}
    assert search.cache.snapshots is not None and search.cache.snapshots.idle()
    assert stored(db)[0][1] == snapshot.format_key()


def test_switched_off_means_nothing_read_or_written(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    loads: list[dict[str, object]],
) -> None:
    seed(indexer)
    write_snapshot(db, embedder)
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE memory_index_snapshots SET max_id = 0"))
    loads.clear()
    search = searcher(db, embedder, min_rows=0)
    answers(search)
    assert loads[0] == {"args": ()}
    assert search.cache.snapshots is not None and search.cache.snapshots.idle()
    assert stored(db)[0][2] == 0  # not rewritten


def test_below_the_threshold_nothing_is_written(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer, sessions=1)
    search = searcher(db, embedder, min_rows=len(TURNS) + 1)
    answers(search)
    assert search.cache.snapshots is not None and search.cache.snapshots.idle()
    assert stored(db) == []
    seed(indexer, sessions=1, first=1)  # now enough rows the snapshot lacks
    answers(search)
    assert search.cache.snapshots.idle() and stored(db)[0][3] == 2 * len(TURNS)


def test_a_failing_write_is_logged_with_the_user(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    writer = snapshot.SnapshotWriter(db.sessions, 1, settle_s=0)

    def broken() -> snapshot.Export | None:
        raise RuntimeError("disk full")

    with caplog.at_level(logging.WARNING, logger="memstrata.retrieval.snapshot"):
        writer.schedule("writer-user", None, broken)
        assert writer.idle()
    writer.close()
    assert writer.failed == 1 and writer.written == 0
    (record,) = [r for r in caplog.records if r.getMessage() == "index.snapshot.failed"]
    assert event_fields(record) == {
        "event": "index.snapshot.failed",
        "user_id": "writer-user",
        "error": "RuntimeError: disk full",
    }


@pytest.mark.parametrize("encoded", [False, True])
def test_a_snapshot_too_large_to_store_is_logged_and_not_written(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    encoded: bool,
) -> None:
    """Too large from its vectors and texts alone (not even encoded), or only once encoded."""
    seed(indexer)
    index = IndexCache(db.sessions).get(USER, embedder.name)
    with index.lock:
        taken = index.export()
    assert taken is not None
    at_least = taken.vectors.nbytes + sum(len(r.text) for r in taken.rows)
    limit = at_least if encoded else at_least - 1
    monkeypatch.setattr(snapshot, "MAX_PAYLOAD_BYTES", limit)
    encodes: list[int] = []
    real_encode = snapshot.encode
    monkeypatch.setattr(snapshot, "encode", lambda *a: encodes.append(1) or real_encode(*a))
    with caplog.at_level(logging.WARNING, logger="memstrata.retrieval.snapshot"):
        search = searcher(db, embedder, min_rows=5)
        search.search(USER, QUERIES[0], as_of=NOW)
        assert search.cache.snapshots is not None and search.cache.snapshots.idle()
    assert stored(db) == []
    assert len(encodes) == int(encoded)
    (record,) = [r for r in caplog.records if r.getMessage() == "index.snapshot.too_large"]
    fields = event_fields(record)
    assert fields["user_id"] == USER and fields["bytes"] > limit == fields["max_bytes"]


def test_healing_vectors_keeps_the_snapshot_and_a_load_from_it_has_them(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    """Re-embedding two rows dropped the user's whole snapshot, so every healing pass of an
    import (or a model change) cost a full cold load and a snapshot rewrite."""
    Indexer(db.sessions, embedder).index_rounds(
        USER,
        [
            Round(f"s{i}", 0, turn, "Noted.", NOW - timedelta(days=i))
            for i, turn in enumerate(TURNS)
        ],
        embed=False,
    )
    write_snapshot(db, embedder)
    assert len(stored(db)) == 1
    report = VectorHealer(db.sessions, embedder).run_once()
    assert report.claimed == len(TURNS) and report.given_up == 0
    assert len(stored(db)) == 1  # kept
    seeded = searcher(db, embedder, min_rows=5)
    from_snapshot = answers(seeded)
    assert seeded.cache.stats().snapshot_loads == 1
    assert from_snapshot == answers(searcher(db, embedder, min_rows=None))
    hits = seeded.search(USER, "Which pet did I adopt?", top_k=3, as_of=NOW)
    assert hits.mode == "hybrid" and hits.hits[0].explain["vector_rank"] is not None

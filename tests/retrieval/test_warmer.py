"""The index warmer: after an import, the index and its snapshot are ready before the
first search; small batches load nothing; a failure is logged with the user."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval import snapshot
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.warmer import IndexWarmer

USER = "warm-user"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TEXTS = [
    "I adopted a golden retriever puppy named Biscuit.",
    "My sister lives in Lisbon and works as an architect.",
    "我最喜欢的饮料是乌龙茶。",
    "I'm training for the Berlin marathon in September.",
]


def rounds(session: str, n: int) -> list[Round]:
    return [
        Round(session, i, f"{TEXTS[i % len(TEXTS)]} ({session} {i})", "Noted.", NOW)
        for i in range(n)
    ]


def service(db: Database, embedder: OpenAICompatibleEmbedder, min_rows: int) -> SearchService:
    cache = IndexCache(db.sessions, snapshots=snapshot.SnapshotWriter(db.sessions, min_rows, 0))
    return SearchService(cache, embedder, warmer=IndexWarmer(cache))


def stored(db: Database) -> list[tuple[int, int]]:
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT max_id, row_count FROM memory_index_snapshots"))
        return [(int(r[0]), int(r[1])) for r in rows]


def settle(search: SearchService) -> None:
    assert search.warmer is not None and search.warmer.idle()
    assert search.cache.snapshots is not None and search.cache.snapshots.idle()


def import_batch(search: SearchService, indexer: Indexer, session: str, n: int) -> None:
    """What the batch endpoint does: store the turns, then ask for a warm."""
    indexer.index_rounds(USER, rounds(session, n))
    search.warm(USER)
    settle(search)


def test_the_rule() -> None:
    # The warmer uses the snapshot writer's rule (warmer.warm_now).
    assert snapshot.should_write(1000, 1000) and snapshot.should_write(5000, 1000)
    assert not snapshot.should_write(999, 1000)
    assert not snapshot.should_write(10_000, 0)  # snapshots off: nothing to warm for


def test_an_import_leaves_a_warm_index_and_a_snapshot(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    search = service(db, embedder, min_rows=8)
    import_batch(search, indexer, "s1", 10)
    assert search.warmer is not None and search.warmer.warmed == 1
    assert stored(db) == [(10, 10)]
    stats = search.cache.stats()
    assert stats.users == 1 and stats.misses == 1
    # The first search finds the index loaded: a hit, nothing read but the generation.
    search.search(USER, "Where does my sister live?")
    assert search.cache.stats().hits == 1
    # Another process's first search starts from the snapshot, with the same answer.
    other = service(db, embedder, min_rows=8)
    expected = [h.text for h in search.search(USER, "marathon training").hits]
    assert [h.text for h in other.search(USER, "marathon training").hits] == expected
    assert other.cache.stats().snapshot_loads == 1
    search.warmer.close()


def test_a_warm_asks_for_one_snapshot_write(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load schedules the write; the warm's own check must not queue a second one
    (the writer would encode and store the same rows again)."""
    asked: list[str] = []
    schedule = snapshot.SnapshotWriter.schedule

    def counting(self: snapshot.SnapshotWriter, user_id: str, *rest: Any) -> None:
        asked.append(user_id)
        schedule(self, user_id, *rest)

    monkeypatch.setattr(snapshot.SnapshotWriter, "schedule", counting)
    search = service(db, embedder, min_rows=8)
    import_batch(search, indexer, "s1", 10)
    assert asked == [USER] and stored(db) == [(10, 10)]
    import_batch(search, indexer, "s2", 8)  # incremental this time
    assert asked == [USER, USER] and stored(db) == [(18, 18)]


def test_later_batches_update_it_incrementally(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    search = service(db, embedder, min_rows=8)
    import_batch(search, indexer, "s1", 10)
    import_batch(search, indexer, "s2", 4)  # below the threshold: nothing to do
    assert stored(db) == [(10, 10)] and search.cache.stats().misses == 1
    import_batch(search, indexer, "s3", 4)  # 8 rows the snapshot lacks
    assert stored(db) == [(18, 18)]
    stats = search.cache.stats()
    assert (stats.misses, stats.hits) == (1, 1)  # refreshed in place, not reloaded
    assert search.warmer is not None and search.warmer.warmed == 2
    search.warmer.close()


def test_a_small_batch_loads_nothing(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    search = service(db, embedder, min_rows=8)
    import_batch(search, indexer, "s1", 7)
    assert search.cache.stats().users == 0 and stored(db) == []
    off = service(db, embedder, min_rows=0)
    indexer.index_rounds(USER, rounds("s2", 20))
    off.warm(USER)
    assert off.warmer is not None and off.warmer.idle()
    assert off.cache.stats().users == 0 and stored(db) == []


def test_a_failed_warm_is_logged_with_the_user_and_the_next_one_works(
    db: Database,
    indexer: Indexer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    search = service(db, embedder, min_rows=8)
    indexer.index_rounds(USER, rounds("s1", 10))
    real_get = search.cache.get

    def broken(user_id: str, model: str | None) -> object:
        raise OSError("the database went away")  # the fault, injected

    monkeypatch.setattr(search.cache, "get", broken)
    with caplog.at_level(logging.WARNING, logger="memstrata.retrieval.warmer"):
        search.warm(USER)
        settle(search)
    (record,) = [r for r in caplog.records if r.getMessage() == "index.warm_failed"]
    assert event_fields(record)["user_id"] == USER
    assert "the database went away" in event_fields(record)["error"]
    assert search.warmer is not None and search.warmer.failed == 1
    monkeypatch.setattr(search.cache, "get", real_get)
    search.warm(USER)
    settle(search)
    assert stored(db) == [(10, 10)]
    search.warmer.close()


def test_a_snapshot_dropped_under_a_current_index_is_written_again(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    """A deletion drops the user's snapshot (here: a turn sent again with new text, as the
    vector worker's write-back also does); a search then brings the index up to date, so
    its own count of rows missing from a snapshot is 1. The next warm — the worker's,
    once a background import is embedded — goes by the database's count and writes it."""
    search = service(db, embedder, min_rows=8)
    import_batch(search, indexer, "s1", 10)
    assert stored(db) == [(10, 10)]
    indexer.index_rounds(USER, [Round("s1", 0, "I adopted a cat named Pixel.", "Noted.", NOW)])
    search.search(USER, "Which pet did I adopt?")  # the index is current again
    assert stored(db) == []
    search.warm(USER)
    settle(search)
    with db.engine.connect() as conn:
        newest = conn.execute(text("SELECT max(id) FROM memory_embeddings")).scalar_one()
    assert stored(db) == [(newest, 10)]

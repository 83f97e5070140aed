"""``memstrata snapshots``: index snapshots written ahead for the users that lack one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.backfill import users_without_snapshot, write_missing_snapshots
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.snapshot import SnapshotWriter
from memstrata.retrieval.staging import content_hash

from .stored import insert_rows


def _turns(db: Database, user: str, n: int, first: int = 0) -> None:
    chunks = [
        NewChunk(
            f"sessions/s/{first + i}", 0, f"{user} turn {first + i} about kites",
            content_hash(f"{user}{first + i}"), datetime(2026, 1, 1, tzinfo=UTC),
        )
        for i in range(n)
    ]  # fmt: skip
    insert_rows(db, user, chunks)


def _snapshots(db: Database) -> dict[str, int]:
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT user_id, row_count FROM memory_index_snapshots"))
        return {r[0]: r[1] for r in rows}


def test_the_users_without_a_snapshot_get_one_and_a_second_run_finds_none(
    db: Database,
) -> None:
    _turns(db, "ann", 5)
    _turns(db, "bob", 4)
    _turns(db, "cy", 2)  # below the threshold: a load would not write one either
    with db.sessions() as session:
        assert users_without_snapshot(session, None, 3) == [("ann", 5), ("bob", 4)]
    seen: list[tuple[str, int]] = []
    done = write_missing_snapshots(db.sessions, None, 3, lambda u, n: seen.append((u, n)))
    assert (done.users, done.written, done.failed) == (2, 2, 0)
    assert seen == [("ann", 5), ("bob", 4)]
    assert _snapshots(db) == {"ann": 5, "bob": 4}
    assert write_missing_snapshots(db.sessions, None, 3).users == 0
    # A snapshot that misses the threshold's worth of newer rows is written again.
    _turns(db, "ann", 3, first=5)
    with db.sessions() as session:
        assert users_without_snapshot(session, None, 3) == [("ann", 3)]
    assert write_missing_snapshots(db.sessions, None, 3).written == 1
    assert _snapshots(db) == {"ann": 8, "bob": 4}


def test_the_snapshot_written_ahead_is_the_one_a_search_loads(db: Database) -> None:
    _turns(db, "dee", 6)
    write_missing_snapshots(db.sessions, None, 3)
    writer = SnapshotWriter(db.sessions, 3)
    cache = IndexCache(db.sessions, snapshots=writer)
    index = cache.get("dee", None)
    assert cache.stats().snapshot_loads == 1 and len(index.rows) == 6
    writer.close()


def test_snapshots_off_is_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS"):
        write_missing_snapshots(db.sessions, None, 0)

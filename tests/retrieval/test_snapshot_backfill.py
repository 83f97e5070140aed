"""The background pass a started server makes: index snapshots written for the users that
lack one (after a database crash emptied the UNLOGGED table), one user at a time, shared
between replicas, and given up at once when the server stops."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.backfill import write_missing_snapshots
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.staging import content_hash
from memstrata.runtime import Memstrata
from tests.waiting import wait_for

from .stored import insert_rows

MIN_ROWS = 3


def _turns(db: Database, user: str, n: int) -> None:
    chunks = [
        NewChunk(
            f"sessions/s/{i}", 0, f"{user} turn {i} about kites", content_hash(f"{user}{i}"),
            datetime(2026, 1, 1, tzinfo=UTC),
        )
        for i in range(n)
    ]  # fmt: skip
    insert_rows(db, user, chunks)


def _snapshots(db: Database) -> dict[str, int]:
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT user_id, row_count FROM memory_index_snapshots"))
        return {r[0]: r[1] for r in rows}


def _crash(db: Database) -> None:
    """What a crash does to the UNLOGGED snapshot table: empties it."""
    with db.engine.begin() as conn:
        conn.execute(text("TRUNCATE memory_index_snapshots"))


@contextmanager
def _other_replica_backfilling(db: Database, user: str) -> Iterator[None]:
    """Another process holding ``user``'s backfill claim, as a replica writing its snapshot."""
    with db.engine.connect() as conn, conn.begin():
        taken = conn.scalar(
            text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"memstrata.snapshot_backfill:{user}"},
        )
        assert taken
        yield


def _passes(err: str) -> list[dict[str, object]]:
    """The ``snapshots.backfill`` lines the pass's child wrote to the test's stderr."""
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "snapshots.backfill"]


def test_a_started_runtime_writes_the_snapshots_a_crash_lost_and_a_cold_search_loads_them(
    db: Database,
    settings: Settings,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")  # the child logs at this process's level
    _turns(db, "ann", 5)
    _turns(db, "bob", 4)
    _turns(db, "cy", 2)  # below the threshold: no snapshot to write
    write_missing_snapshots(db.sessions, None, MIN_ROWS)
    assert _snapshots(db) == {"ann": 5, "bob": 4}
    _crash(db)
    tuned = settings.model_copy(update={"index_snapshot_min_rows": MIN_ROWS, "log_json": True})
    with Memstrata.open(tuned, database=db, embedder=None) as server:
        server.start_background()
        wait_for(lambda: not server.snapshot_backfill.running, 30, "the pass to end")
    assert _snapshots(db) == {"ann": 5, "bob": 4}
    passes = _passes(capfd.readouterr().err)
    assert [
        {k: p[k] for k in ("users", "written", "failed", "skipped", "stopped")} for p in passes
    ] == [{"users": 2, "written": 2, "failed": 0, "skipped": 0, "stopped": False}]
    with Memstrata.open(tuned, database=db, embedder=None) as replica:  # a cold cache
        found = replica.search.search("ann", "kites", top_k=3)
        assert len(found.hits) == 3
        assert replica.search.cache.stats().snapshot_loads == 1


def test_the_pass_is_off_with_its_setting(
    db: Database, settings: Settings, capfd: pytest.CaptureFixture[str]
) -> None:
    _turns(db, "ann", 5)
    off = settings.model_copy(
        update={"index_snapshot_min_rows": MIN_ROWS, "index_snapshot_backfill": False}
    )
    with Memstrata.open(off, database=db, embedder=None) as server:
        server.start_background()
        assert not server.snapshot_backfill.running
        time.sleep(3.0)  # the pass, were it on, writes ann's within ~2 s (a child starting)
    assert _snapshots(db) == {}
    assert _passes(capfd.readouterr().err) == []


def test_a_user_another_replica_is_backfilling_is_left_to_it(db: Database) -> None:
    _turns(db, "ann", 5)
    _turns(db, "bob", 4)
    with _other_replica_backfilling(db, "ann"):
        done = write_missing_snapshots(db.sessions, None, MIN_ROWS)
    assert (done.users, done.written, done.skipped, done.failed) == (2, 1, 1, 0)
    assert _snapshots(db) == {"bob": 4}


def test_a_user_whose_snapshot_was_written_meanwhile_is_not_loaded_again(db: Database) -> None:
    _turns(db, "ann", 5)
    _turns(db, "bob", 4)

    def progress(user: str, _rows: int) -> None:
        if user == "ann":  # another replica wrote bob's after this one listed him
            assert write_missing_snapshots(db.sessions, None, MIN_ROWS).written == 1

    done = write_missing_snapshots(db.sessions, None, MIN_ROWS, progress)
    assert (done.users, done.written, done.skipped) == (2, 1, 1)
    assert _snapshots(db) == {"ann": 5, "bob": 4}


def test_a_stopped_pass_ends_before_its_next_user(db: Database) -> None:
    _turns(db, "ann", 5)
    _turns(db, "bob", 4)
    stop = threading.Event()
    done = write_missing_snapshots(db.sessions, None, MIN_ROWS, lambda *_: stop.set(), stop=stop)
    assert (done.users, done.written, done.stopped) == (2, 1, True)
    assert _snapshots(db) == {"ann": 5}

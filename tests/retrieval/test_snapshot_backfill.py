"""The background pass a started server makes: index snapshots written for the users that
lack one (after a database crash emptied the UNLOGGED table), one user at a time, shared
between replicas, and given up at once when the server stops."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval import snapshot_backfill
from memstrata.retrieval.backfill import write_missing_snapshots
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.staging import content_hash
from memstrata.runtime import Memstrata
from tests.waiting import wait_for

from .stored import insert_rows

MIN_ROWS = 3


def turns(db: Database, user: str, n: int) -> None:
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
def other_replica_backfilling(db: Database, user: str) -> Iterator[None]:
    """Another process holding ``user``'s backfill claim, as a replica writing its snapshot."""
    with db.engine.connect() as conn, conn.begin():
        taken = conn.scalar(
            text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"memstrata.snapshot_backfill:{user}"},
        )
        assert taken
        yield


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command of each child process the pass starts (each is still started)."""
    started: list[list[str]] = []
    spawn = snapshot_backfill.popen_ending_with_process

    def spied(command: list[str], **options: Any) -> subprocess.Popen[bytes]:
        started.append(command)
        return spawn(command, **options)

    monkeypatch.setattr(snapshot_backfill, "popen_ending_with_process", spied)
    return started


def _lock_waits(db: Database) -> int:
    with db.engine.connect() as conn:
        query = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
        return int(conn.scalar(text(query)) or 0)


def _passes(err: str) -> list[dict[str, object]]:
    """The ``snapshots.backfill`` lines the pass's child wrote to the test's stderr."""
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "snapshots.backfill"]


def test_a_started_runtime_writes_the_snapshots_a_crash_lost_and_a_cold_search_loads_them(
    db: Database,
    settings: Settings,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    children: list[list[str]],
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")  # the child logs at this process's level
    turns(db, "ann", 5)
    turns(db, "bob", 4)
    turns(db, "cy", 2)  # below the threshold: no snapshot to write
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
    assert len(children) == 1
    with Memstrata.open(tuned, database=db, embedder=None) as replica:  # a cold cache
        found = replica.search.search("ann", "kites", top_k=3)
        assert len(found.hits) == 3
        assert replica.search.cache.stats().snapshot_loads == 1


def test_a_start_with_every_snapshot_current_starts_no_child(
    db: Database,
    settings: Settings,
    capfd: pytest.CaptureFixture[str],
    children: list[list[str]],
) -> None:
    """The child (a Python process: ~1.1 s of CPU, 100 MB) is started only when a user
    lacks a snapshot, which the server asks first, off the starting thread."""
    turns(db, "ann", 5)
    turns(db, "cy", 2)  # below the threshold: no snapshot to write
    write_missing_snapshots(db.sessions, None, MIN_ROWS)
    tuned = settings.model_copy(update={"index_snapshot_min_rows": MIN_ROWS, "log_json": True})
    with Memstrata.open(tuned, database=db, embedder=None) as server:
        server.start_background()
        wait_for(lambda: not server.snapshot_backfill.running, 30, "the check to end")
    assert children == []
    assert _passes(capfd.readouterr().err) == []
    assert _snapshots(db) == {"ann": 5}


def test_a_stop_during_the_check_starts_no_child(db: Database, children: list[list[str]]) -> None:
    """The check waits on the snapshot table (another transaction holds it) when the
    server stops: ``stop`` returns at once, and the check, once answered, starts nothing."""
    turns(db, "ann", 5)  # lacks a snapshot: the check, let be, starts the child
    url = db.engine.url.render_as_string(hide_password=False)
    backfill = snapshot_backfill.SnapshotBackfill(url, None, MIN_ROWS, "INFO", True)
    with db.engine.connect() as holder, holder.begin():
        holder.execute(text("LOCK TABLE memory_index_snapshots IN ACCESS EXCLUSIVE MODE"))
        backfill.start()
        wait_for(lambda: _lock_waits(db) == 1, 20, "the check to wait for the table")
        began = time.monotonic()
        backfill.stop()
        took = time.monotonic() - began
    wait_for(lambda: not backfill.running, 20, "the check to end")
    assert children == []
    assert took < 1.0
    assert _snapshots(db) == {}


def test_the_pass_is_off_with_its_setting(
    db: Database, settings: Settings, capfd: pytest.CaptureFixture[str]
) -> None:
    turns(db, "ann", 5)
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
    turns(db, "ann", 5)
    turns(db, "bob", 4)
    with other_replica_backfilling(db, "ann"):
        done = write_missing_snapshots(db.sessions, None, MIN_ROWS)
    assert (done.users, done.written, done.skipped, done.failed) == (2, 1, 1, 0)
    assert _snapshots(db) == {"bob": 4}


def test_a_user_whose_snapshot_was_written_meanwhile_is_not_loaded_again(db: Database) -> None:
    turns(db, "ann", 5)
    turns(db, "bob", 4)

    def progress(user: str, _rows: int) -> None:
        if user == "ann":  # another replica wrote bob's after this one listed him
            assert write_missing_snapshots(db.sessions, None, MIN_ROWS).written == 1

    done = write_missing_snapshots(db.sessions, None, MIN_ROWS, progress)
    assert (done.users, done.written, done.skipped) == (2, 1, 1)
    assert _snapshots(db) == {"ann": 5, "bob": 4}


def test_a_stopped_pass_ends_before_its_next_user(db: Database) -> None:
    turns(db, "ann", 5)
    turns(db, "bob", 4)
    stop = threading.Event()
    done = write_missing_snapshots(db.sessions, None, MIN_ROWS, lambda *_: stop.set(), stop=stop)
    assert (done.users, done.written, done.stopped) == (2, 1, True)
    assert _snapshots(db) == {"ann": 5}

"""``memstrata serve`` stopped in the middle of its snapshot pass exits within its grace.

A real server process on the session's PostgreSQL. The fault: a writer of the first user's
rows (another replica's import) holds that user's lock, so the pass's snapshot write for
that user waits on it when SIGTERM comes.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from tests.cli.test_shutdown_grace import serving
from tests.retrieval.fault_server import FaultServer
from tests.retrieval.test_snapshot_backfill import turns
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

GRACE_S = 5


def _advisory_waits(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.scalar(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            )
            or 0
        )


def test_a_server_stopped_mid_pass_exits_within_its_grace(
    tmp_path: Path, pg_url: str, db: Database
) -> None:
    turns(db, "ann", 6)  # the most rows: the pass's first user
    turns(db, "bob", 4)
    with FaultServer("ok") as fake, db.engine.connect() as writer, writer.begin():
        writer.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": "memstrata.embeddings:ann"},
        )
        with serving(
            tmp_path, pg_url, fake, GRACE_S, INDEX_SNAPSHOT_MIN_ROWS="3", EMBEDDING_HEAL="false"
        ) as served:
            wait_for(lambda: _advisory_waits(db) == 1, 20, "the pass's write of ann's snapshot")
            began = time.monotonic()
            served.process.send_signal(signal.SIGTERM)
            served.process.wait(timeout=GRACE_S + 30)
            took = time.monotonic() - began
            assert took < GRACE_S, served.stderr()
            passes = served.events("snapshots.backfill")
    assert [(p["users"], p["written"], p["stopped"]) for p in passes] == [(2, 0, True)]
    with db.engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM memory_index_snapshots")) == 0

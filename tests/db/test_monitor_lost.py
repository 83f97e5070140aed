"""A lost database stays disposed of: every failed check closes the idle connections of
the pools, the state reader's included, so a smart shutdown never waits for them."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import create_engine

from memstrata.db import monitor
from memstrata.db.database import Database
from memstrata.db.monitor import DatabaseMonitor
from memstrata.logs import event_fields
from memstrata.retrieval.state_reader import state_reader

LOST = "connection failed: FATAL:  the database system is shutting down"


def test_every_failed_check_closes_the_idle_connections_of_the_state_reader(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CI: a smart shutdown right after a restart, before a check had seen the server
    answer, waited for good for one idle connection of the state reader's pool — the
    monitor disposed only on the first failed check, and the reader's pool has no rule
    closing connections handed back while the database is lost."""
    engine = create_engine(db.engine.url)
    try:
        watcher = DatabaseMonitor(engine)
        reader = state_reader(engine)
        monkeypatch.setattr(monitor, "probe", lambda _engine: LOST)
        caplog.set_level(logging.INFO, logger="memstrata.db.monitor")
        for _ in range(3):
            reader.read("alice")  # a search's check: its connection goes back idle
            assert reader.engine.pool.checkedin() == 1
            watcher.check_once()
            assert reader.engine.pool.checkedin() == 0
        events = [event_fields(r)["event"] for r in caplog.records if event_fields(r)]
        assert events == ["db.lost"]  # logged once all the same
        watcher.stop()
    finally:
        engine.dispose()

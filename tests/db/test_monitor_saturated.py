"""A server whose connection slots are all taken is saturated, not lost."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import create_engine

from memstrata.db import monitor
from memstrata.db.database import Database
from memstrata.db.monitor import DatabaseMonitor
from memstrata.logs import event_fields

SATURATED = "connection failed: FATAL:  sorry, too many clients already"
LOST = "connection failed: Connection refused"


@pytest.mark.parametrize(("reason", "kept"), [(SATURATED, True), (LOST, False)])
def test_a_full_server_keeps_the_pool_a_lost_one_does_not(
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    reason: str,
    kept: bool,
) -> None:
    """With max_connections reached, the monitor called the database lost and disposed
    the pool: the connections that still worked were closed, and every request, needing
    a new one, got a 503 until slots freed up."""
    engine = create_engine(db.engine.url)
    try:
        watcher = DatabaseMonitor(engine)
        pool = engine.pool
        monkeypatch.setattr(monitor, "probe", lambda _engine: reason)
        caplog.set_level(logging.INFO, logger="memstrata.db.monitor")
        watcher.check_once()
        watcher.check_once()
        assert (engine.pool is pool) is kept
        assert (watcher.error is None) is kept and watcher.saturated is kept
        events = [event_fields(r)["event"] for r in caplog.records if event_fields(r)]
        assert events == (["db.saturated"] if kept else ["db.lost"])  # once each
        monkeypatch.setattr(monitor, "probe", lambda _engine: None)
        watcher.check_once()
        assert watcher.saturated is False and watcher.error is None
        watcher.stop()
    finally:
        engine.dispose()


def test_the_sqlstate_alone_is_enough() -> None:
    assert monitor.saturated("FATAL:  remaining connection slots are reserved for roles")
    assert monitor.saturated("some words (too many connections)")
    assert monitor.saturated('FATAL:  too many connections for role "app"')
    assert not monitor.saturated(LOST)

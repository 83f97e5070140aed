"""Checkouts waiting for a pooled connection give up once the database monitor finds the
database lost, searches that would load a user's index from it are refused at once, and a
refusal or a new connection after the server is back has the monitor check again at once.
On a PostgreSQL server of this module's own, frozen with SIGSTOP as
``tests/api/test_frozen_database_outage.py`` does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.db.monitor import DatabaseMonitor
from memstrata.errors import DatabaseUnavailableError
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_frozen_database_outage import BOUND_S, FILE, INTERVAL_S, Server
from tests.db.frozen import searches_refused_while_lost
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    embedded = EmbeddedPostgres(tmp_path_factory.mktemp("waiters"), database="memstrata_waiters")
    url = embedded.start()
    yield Server(embedded.pgdata, url)
    embedded.stop()


@pytest.fixture
def engine(server: Server) -> Iterator[Engine]:
    """One pooled connection and two of overflow: three checkouts fill it."""
    engine = make_engine(server.url, pool_size=1)
    yield engine
    engine.dispose()


def _fill(engine: Engine) -> list[Connection]:
    held = [engine.connect() for _ in range(3)]
    assert engine.pool.checkedout() == 3  # type: ignore[attr-defined]
    return held


def _release(held: list[Connection]) -> None:
    for conn in held:
        conn.invalidate()  # cut in the freeze: not pooled again
        conn.close()


class Checkout(threading.Thread):
    """``engine.connect()`` on a thread of its own: what it raised and when it ended."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.error: BaseException | None = None
        self.ended = 0.0

    def run(self) -> None:
        try:
            self.engine.connect().close()
        except Exception as exc:  # the test reads it
            self.error = exc
        self.ended = time.monotonic()


def test_a_checkout_waiting_for_the_pool_gives_up_when_the_server_is_found_lost(
    server: Server, engine: Engine
) -> None:
    """Drill: of 45 requests in a freeze, the 30 waiting for one of the pool's 15
    connections woke only when one was handed back, so at the pool's timeout (10 s) or
    the freeze's end: ~12 s after the stop although the monitor knew it lost after ~5 s."""
    watcher = DatabaseMonitor(engine, interval_s=60)  # the checks below are the test's
    held = _fill(engine)
    try:
        with server.stopped():
            waiter = Checkout(engine)
            waiter.start()
            time.sleep(0.3)  # waiting for one of the three
            assert waiter.is_alive()
            assert watcher.check_once() is not None and watcher.frozen
            decided = time.monotonic()
            waiter.join(3)
            assert not waiter.is_alive(), "still waiting for a pooled connection"
            assert waiter.ended - decided < 0.5, waiter.ended - decided
            # The monitor's words, as every refusal while lost; a SQLAlchemy error too,
            # which the workers that catch those treat as the database away.
            assert isinstance(waiter.error, DatabaseUnavailableError), waiter.error
            assert isinstance(waiter.error, SQLAlchemyError)
            assert "db.lost" in str(waiter.error)
            # Not a pool timeout: memstrata_database_pool_timeouts_total counts a pool too
            # small for its load, which a lost database says nothing about.
            stats = engine.pool.stats()  # type: ignore[attr-defined]
            assert (stats.timeouts, stats.waiting, stats.refused) == (0, 0, 1)
        _release(held)
        held = []
        # Back by itself once the monitor finds the server answering.
        assert watcher.check_once() is None and watcher.error is None
        held = _fill(engine)
        waiter = Checkout(engine)
        waiter.start()
        time.sleep(0.2)
        held.pop().close()  # handed back: the waiter gets it, as before
        waiter.join(5)
        assert waiter.error is None and not waiter.is_alive()
    finally:
        _release(held)
        watcher.stop()


def test_requests_waiting_for_a_pool_slot_in_a_freeze_get_a_503_at_the_decision(
    server: Server, settings: Settings, auth: AuthHeader
) -> None:
    """The drill's case, smaller: 9 requests on a pool of 3 connections, none warm."""
    own = settings.model_copy(
        update={"database_url": server.url, "db_check_interval_s": INTERVAL_S, "db_pool_size": 1}
    )
    mem = Memstrata.open(own)
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            put = client.put(FILE, headers=auth("alice"), json={"content": "# me\n"})
            assert put.status_code == 200
            mem.db.engine.dispose()  # nothing pooled: three open connections, six wait
            answers: list[tuple[int, str, float]] = []

            def read() -> None:
                response = client.get(FILE, headers=auth("alice"))
                answers.append(
                    (response.status_code, response.json().get("code"), time.monotonic())
                )

            with server.stopped():
                began = time.monotonic()
                threads = [threading.Thread(target=read) for _ in range(9)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(20)
            assert [a[:2] for a in answers] == [(503, "database_unavailable")] * 9
            waited = max(a[2] for a in answers) - began
            assert waited < BOUND_S, waited
            wait_for(lambda: mem.db.up() is True, 15, "the monitor to find the database up")
            assert client.get(FILE, headers=auth("alice")).status_code == 200
    finally:
        mem.close()


def test_searches_that_would_load_an_index_are_refused_at_once_while_lost(
    server: Server, settings: Settings, auth: AuthHeader
) -> None:
    """Drill: a search whose user's index was not cached loaded its rows on the main pool,
    a new connection that waited 2 s in a freeze for each search queued on the index."""
    own = settings.model_copy(
        update={"database_url": server.url, "db_check_interval_s": INTERVAL_S}
    )
    mem = Memstrata.open(own)
    body = {"query": "me", "top_k": 3}
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            put = client.put(FILE, headers=auth("carol"), json={"content": "# me\n"})
            assert put.status_code == 200  # written, never searched: its index not cached
            searches_refused_while_lost(server, mem, client, auth("carol"), body)
    finally:
        mem.close()


@pytest.mark.parametrize("after_thaw", ["refusal", "refused_connection"])
def test_the_monitor_checks_at_once_when_asked_after_the_server_is_back(
    server: Server, after_thaw: str
) -> None:
    """Up to one check (1 s by default) after the server was back, every search and write
    was refused still: the monitor had not seen it answer yet. A refusal, or a connection
    refused meanwhile (the server was found frozen: no new connection until it answers),
    now has it check again at once."""
    engine = make_engine(server.url)
    db = Database(engine, make_session_factory(engine), check_interval_s=30)
    monitor = db.monitor
    try:
        monitor.start()
        wait_for(lambda: monitor._sentinel is not None, 5, "the monitor's open connection")
        with server.stopped():
            assert monitor.check_once() is not None  # the test's: the thread waits 30 s
        assert db.up() is False
        began = time.monotonic()
        if after_thaw == "refusal":
            with pytest.raises(DatabaseUnavailableError):
                db.refuse_if_lost()
        else:
            with pytest.raises(DatabaseUnavailableError):
                engine.connect()
        wait_for(lambda: db.up() is True, 3, "the monitor to find the database up")
        assert time.monotonic() - began < 1.0
        db.refuse_if_lost()
    finally:
        monitor.stop()
        engine.dispose()


def test_a_stopped_monitor_leaves_no_checkout_refused(server: Server, engine: Engine) -> None:
    """Stopped while it found the database lost (``Memstrata.stop_background``), nothing
    would reopen the gate: every checkout that waited would be refused for good."""
    watcher = DatabaseMonitor(engine, interval_s=60)
    with server.stopped():
        assert watcher.check_once() is not None
    watcher.stop()
    held = _fill(engine)
    try:
        waiter = Checkout(engine)
        waiter.start()
        time.sleep(0.2)
        assert waiter.is_alive()  # waiting, not refused
        held.pop().close()
        waiter.join(5)
        assert waiter.error is None and not waiter.is_alive()
    finally:
        _release(held)

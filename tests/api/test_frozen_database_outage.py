"""A database whose processes are stopped (SIGSTOP), on a PostgreSQL server of this module's
own: the session's server is shared by every other test.

Before, a request holding an open pooled connection waited for the whole freeze (603 s in
a drill) and then answered 200; ``/metrics`` read the backlog while the monitor knew the
database lost; and with only the postmaster stopped the monitor closed the pooled
connections that still worked."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.engine import make_engine
from memstrata.db.monitor import PROBE_TIMEOUT_S, DatabaseMonitor
from memstrata.logs import event_fields
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.state_reader import state_reader
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader

FILE = "/api/config/agent-files/user"
SEARCH = "/api/memory/search"
INTERVAL_S = 0.25  # the monitor's, shortened (MEMSTRATA_DB_CHECK_INTERVAL_S)
FREEZE_S = 12.0  # the longest a test keeps the server stopped: old code waited all of it
# Detection: one interval, the new connection's timeout, then the open connection's.
BOUND_S = INTERVAL_S + 2 * PROBE_TIMEOUT_S + 2.5


class Server:
    def __init__(self, pgdata: Path, url: str) -> None:
        self.pgdata = pgdata
        self.url = url

    def pids(self, *, postmaster_only: bool) -> list[int]:
        postmaster = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        if postmaster_only:
            return [postmaster]
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            if int(fields[1]) == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]

    @contextmanager
    def stopped(self, *, postmaster_only: bool = False) -> Iterator[None]:
        """Stopped until the block ends, or FREEZE_S at the latest (a hung request of the
        old code then returns, and the test fails instead of hanging)."""
        pids = self.pids(postmaster_only=postmaster_only)
        resumed = threading.Event()

        def resume() -> None:
            if not resumed.is_set():
                resumed.set()
                for pid in pids:
                    signal_if_alive(pid, signal.SIGCONT)

        for pid in pids:
            signal_if_alive(pid, signal.SIGSTOP)
        timer = threading.Timer(FREEZE_S, resume)
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            resume()


def signal_if_alive(pid: int, signum: int) -> None:
    """A backend can end between the listing and the signal (a pool just disposed of closes
    its connections while the test goes on): only the living are stopped and resumed."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    embedded = EmbeddedPostgres(tmp_path_factory.mktemp("frozen"), database="memstrata_frozen")
    url = embedded.start()
    yield Server(embedded.pgdata, url)
    embedded.stop()


@pytest.fixture
def served(
    server: Server, settings: Settings, embedding_server: LocalEmbeddingServer
) -> Iterator[tuple[Memstrata, TestClient]]:
    """The app on the module's server, its monitor checking every INTERVAL_S, with an
    embedder (so /metrics has a backlog to read)."""
    own = settings.model_copy(
        update={"database_url": server.url, "db_check_interval_s": INTERVAL_S}
    )
    mem = Memstrata.open(own, embedder=OpenAICompatibleEmbedder(embedding_server.model_spec))
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield mem, client
    finally:
        mem.close()


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    found = [event_fields(r) for r in caplog.records]
    return [f for f in found if f and f["event"] == name]


def _wait(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_requests_on_open_connections_get_a_503_soon_after_the_server_freezes(
    server: Server,
    served: tuple[Memstrata, TestClient],
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drill: 5 of 30 requests took 72–75 s in a 75 s freeze, then answered 200; a warm
    MCP read 603 s. Now the monitor shuts the frozen connections' sockets down."""
    mem, client = served
    caplog.set_level(logging.INFO)
    assert client.put(FILE, headers=auth("alice"), json={"content": "# me\n"}).status_code == 200
    # Warm connections in the pool, one for each request below (its pre-ping hangs): one
    # that needs a new connection waits for connect_timeout instead (10 s).
    held = [mem.db.engine.connect() for _ in range(mem.settings.db_pool_size)]
    for conn in held:
        conn.close()
    answers: list[tuple[int, str, float]] = []

    def read() -> None:
        started = time.monotonic()
        response = client.get(FILE, headers=auth("alice"))
        answers.append((response.status_code, response.json().get("code"), started))

    with server.stopped():
        threads = [threading.Thread(target=read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(FREEZE_S + 5)
        ended = time.monotonic()
        assert mem.db.up() is False
    assert len(answers) == 3
    assert [a[:2] for a in answers] == [(503, "database_unavailable")] * 3
    waited = max(ended - a[2] for a in answers)
    assert waited < BOUND_S, waited
    (cut,) = _events(caplog, "db.interrupted")
    assert int(str(cut["connections"])) >= 3
    refused = [e for e in _events(caplog, "http.error") if e.get("status") == 503]
    assert {e["user_id"] for e in refused} == {"alice"} and len(refused) == 3
    # Back to normal once the server runs again.
    assert _wait(lambda: mem.db.up() is True, 10)
    assert client.get(FILE, headers=auth("alice")).status_code == 200


def test_a_search_hung_on_its_index_check_gets_a_503_soon_after_the_server_freezes(
    served: tuple[Memstrata, TestClient], server: Server, auth: AuthHeader
) -> None:
    """The check before every search runs on a pool of its own (retrieval.state_reader):
    untracked, a search whose index was current waited on it for the whole freeze."""
    mem, client = served
    # Two users: one user's searches take turns at the check (the index's lock).
    users = ["alice", "bob"]
    body = {"query": "me", "top_k": 3}
    for user in users:
        assert client.put(FILE, headers=auth(user), json={"content": "# me\n"}).status_code == 200
        warm = client.post(SEARCH, headers=auth(user), json=body)
        assert warm.status_code == 200, warm.text  # the index cached: only the check reads
    # A warm connection of the check's pool for each search below: one opening a new
    # connection waits for connect_timeout instead (10 s), as on the main pool.
    checks = state_reader(mem.db.engine).engine
    held = [checks.raw_connection() for _ in range(2)]
    for conn in held:
        conn.close()
    answers: list[tuple[int, str, float]] = []

    def search(user: str) -> None:
        started = time.monotonic()
        response = client.post(SEARCH, headers=auth(user), json=body)
        answers.append((response.status_code, response.json().get("code"), started))

    with server.stopped():
        threads = [threading.Thread(target=search, args=(user,)) for user in users]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(FREEZE_S + 5)
        ended = time.monotonic()
        assert mem.db.up() is False
    assert [a[:2] for a in answers] == [(503, "database_unavailable")] * 2
    waited = max(ended - a[2] for a in answers)
    assert waited < BOUND_S, waited
    assert _wait(lambda: mem.db.up() is True, 10)
    assert all(client.post(SEARCH, headers=auth(u), json=body).status_code == 200 for u in users)


def test_metrics_answer_at_once_while_the_database_is_frozen(
    server: Server, served: tuple[Memstrata, TestClient]
) -> None:
    """Drill: /metrics took 5–12 s in a freeze (Prometheus' default scrape timeout is
    10 s): it read the backlog although the monitor had found the database lost."""
    mem, client = served
    assert client.get("/metrics").status_code == 200
    with server.stopped():
        assert _wait(lambda: mem.db.up() is False, BOUND_S)
        started = time.monotonic()
        response = client.get("/metrics")
        took = time.monotonic() - started
    assert response.status_code == 200
    assert "memstrata_database_up 0.0" in response.text
    assert took < 1.0, took


def test_a_stopped_postmaster_keeps_the_connections_that_still_work(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Drill: with only the postmaster stopped, 27 of 30 requests got a 503 after 20–24 s:
    a new connection timed out, and the monitor disposed the pool whose backends answered."""
    engine = make_engine(server.url)
    # No check of its own during the test (the checks below are the test's): a postmaster
    # stopped before the first check is told apart too, the open connection made at start.
    watcher = DatabaseMonitor(engine, interval_s=60)
    caplog.set_level(logging.INFO, logger="memstrata.db.monitor")
    try:
        watcher.start()
        assert _wait(lambda: watcher._sentinel is not None, 5)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        pool = engine.pool
        with server.stopped(postmaster_only=True):
            assert watcher.check_once() is None
            assert watcher.check_once() is None
            assert engine.pool is pool and watcher.error is None and watcher.not_accepting
            started = time.monotonic()
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
            assert time.monotonic() - started < 1.0
        assert len(_events(caplog, "db.not_accepting")) == 1 and not _events(caplog, "db.lost")
        assert watcher.check_once() is None and not watcher.not_accepting
    finally:
        watcher.stop()
        engine.dispose()


def test_a_frozen_server_is_lost_when_its_open_connection_does_not_answer_either(
    server: Server,
) -> None:
    """The counterpart: everything stopped, the open connection times out too."""
    engine = make_engine(server.url)
    watcher = DatabaseMonitor(engine, interval_s=INTERVAL_S)
    try:
        assert watcher.check_once() is None
        with server.stopped():
            error = watcher.check_once()
            assert error is not None and "timeout" in error
            assert watcher.frozen
    finally:
        watcher.stop()
        engine.dispose()

"""Work that would wait for a database the monitor already finds lost is refused at once:
a write's next embedding request, a connection being opened when the server froze, one
user's searches queued for the index check; and ``/readyz`` agrees with requests while the
postmaster alone is stopped. On a PostgreSQL server of this module's own (the session's is
shared by every other test); the freeze is ``tests/api/test_frozen_database_outage.py``'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.engine import make_engine
from memstrata.db.monitor import DatabaseMonitor
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_batch_turns import BATCH, _turn
from tests.api.test_frozen_database_outage import BOUND_S, FILE, INTERVAL_S, SEARCH, Server
from tests.db.frozen import searches_refused_while_lost
from tests.reliability.test_database_faults import pg_ctl
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

TURNS = 48  # 6 requests of 8 texts
PER_TEXT_S = 0.1  # the slow fake's delay per text: 0.8 s a request, 4.8 s for the batch
STOP_AFTER_S = 0.5


class Own:
    """The module's server: frozen with ``server.stopped()``, stopped with ``fast_stop``."""

    def __init__(self, embedded: EmbeddedPostgres, url: str) -> None:
        self.embedded = embedded
        self.server = Server(embedded.pgdata, url)

    def fast_stop(self) -> None:
        pg_ctl(self.embedded.pgdata, "-m", "fast", "-w", "stop")


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Own]:
    embedded = EmbeddedPostgres(tmp_path_factory.mktemp("lost"), database="memstrata_lost")
    url = embedded.start()
    yield Own(embedded, url)
    embedded.stop()


@contextmanager
def _served(settings: Settings, **changes: object) -> Iterator[tuple[Memstrata, TestClient]]:
    mem = Memstrata.open(settings.model_copy(update=changes))
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield mem, client
    finally:
        mem.close()


@pytest.fixture
def served(own: Own, settings: Settings) -> Iterator[tuple[Memstrata, TestClient]]:
    """The app on the module's server (BM25 only), its monitor checking every INTERVAL_S."""
    with _served(settings, database_url=own.server.url, db_check_interval_s=INTERVAL_S) as got:
        yield got


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    found = [event_fields(r) for r in caplog.records]
    return [f for f in found if f and f["event"] == name]


# A memory file of as many chunks as the batch has turns (each paragraph a chunk of its own).
PARAGRAPH = " ".join(["the harbour lanterns"] * 120)
WRITES = {
    "batch": (
        "post",
        BATCH,
        {"turns": [_turn("s1", i, f"turn {i} about the harbour") for i in range(TURNS)]},
    ),
    "memory_file": (
        "put",
        FILE,
        {"content": "\n\n".join(f"{i} {PARAGRAPH}" for i in range(TURNS))},
    ),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_sends_no_embedding_request_once_the_database_is_lost(
    own: Own,
    settings: Settings,
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
    write: str,
) -> None:
    """Drill: a 200-turn batch hit by a fast shutdown 0.5 s in answered 503 after its whole
    budget (16.5 s): its embedding requests went on, whose vectors nothing could store."""
    method, path, body = WRITES[write]
    with FaultServer("ok") as fake:
        spec = EmbeddingModelSpec(name="fake-model", base_url=fake.base_url)
        with _served(
            settings,
            database_url=own.server.url,
            db_check_interval_s=INTERVAL_S,
            embedding_models=[spec],
            embedding_file_budget_s=60.0,  # not what ends it
            embedding_max_retries=0,
            embedding_heal_interval_s=60.0,
        ) as (mem, client):
            fake.mode, fake.delay_s = "slow", PER_TEXT_S
            caplog.set_level(logging.INFO)
            stopped_at: list[float] = []

            def stop_once_embedding() -> None:
                # Once the write embeds: its reads before are done (a busy host could
                # otherwise make one of them meet the stop, a 503 all the same).
                wait_for(
                    lambda: any("harbour" in str(r.body.get("input")) for r in fake.requests),
                    20,
                    "the write's first embedding request",
                )
                time.sleep(STOP_AFTER_S)
                stopped_at.append(time.monotonic())
                own.fast_stop()

            stop = threading.Thread(target=stop_once_embedding)
            stop.start()
            try:
                response = client.request(method, path, headers=auth("alice"), json=body)
                took = time.monotonic() - stopped_at[0]
            finally:
                stop.join()
                assert own.embedded.restart()
            assert (response.status_code, response.json()["code"]) == (
                503,
                "database_unavailable",
            ), response.text
            texts = [t for r in fake.requests for t in r.body["input"] if "harbour" in t]
            # The stop 0.5 s into the first request, detection (one check), then the
            # request in flight: at most half of the texts (all of them took 4.8 s).
            assert len(texts) <= TURNS // 2, len(texts)
            assert took < INTERVAL_S + 8 * PER_TEXT_S + 1.5, took
            (refused,) = [e for e in _events(caplog, "http.error") if e.get("status") == 503]
            assert refused["user_id"] == "alice"
            assert refused["error"] == "DatabaseUnavailableError"
            assert "db.lost" in str(refused["detail"]), refused
            assert not _events(caplog, "sync.index_failed")  # a database error, not the index's
            wait_for(lambda: mem.db.up() is True, 15, "the monitor to find the database up")
            fake.delay_s = 0.0
            again = client.request(method, path, headers=auth("alice"), json=body)
            assert again.status_code == 200, again.text


def test_connections_being_opened_when_the_server_freezes_end_once_it_is_found_frozen(
    own: Own, served: tuple[Memstrata, TestClient], auth: AuthHeader
) -> None:
    """Drill: of 45 requests in a freeze, those that had begun opening a connection before
    the monitor decided waited out connect_timeout (10 s): median 10.1 s, at most 12.2 s."""
    mem, client = served
    assert client.put(FILE, headers=auth("alice"), json={"content": "# me\n"}).status_code == 200
    mem.db.engine.dispose()  # nothing pooled: each request below opens a connection
    answers: list[tuple[int, str]] = []

    def read() -> None:
        response = client.get(FILE, headers=auth("alice"))
        answers.append((response.status_code, response.json().get("code")))

    with own.server.stopped():
        began = time.monotonic()
        threads = [threading.Thread(target=read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        waited = time.monotonic() - began
        assert mem.db.up() is False
    assert answers == [(503, "database_unavailable")] * 3
    assert waited < BOUND_S, waited
    wait_for(lambda: mem.db.up() is True, 15, "the monitor to find the database up")
    assert client.get(FILE, headers=auth("alice")).status_code == 200


def test_one_users_searches_are_refused_at_once_while_the_database_is_lost(
    own: Own, served: tuple[Memstrata, TestClient], auth: AuthHeader
) -> None:
    """Drill: one user's searches queued on the index's lock, and each, once it had the
    lock, opened a connection for the check that waited its 2 s: about 2 s more each."""
    mem, client = served
    body = {"query": "me", "top_k": 3}
    assert client.put(FILE, headers=auth("alice"), json={"content": "# me\n"}).status_code == 200
    assert client.post(SEARCH, headers=auth("alice"), json=body).status_code == 200
    searches_refused_while_lost(own.server, mem, client, auth("alice"), body)


def test_readyz_is_ready_while_the_postmaster_alone_is_stopped(
    own: Own, served: tuple[Memstrata, TestClient], auth: AuthHeader
) -> None:
    """Requests are served on the pooled connections then (db.not_accepting); /readyz,
    whose probe opens a new connection, answered 503 and took the replica out."""
    mem, client = served
    assert client.put(FILE, headers=auth("alice"), json={"content": "# me\n"}).status_code == 200
    assert client.get("/readyz").status_code == 200
    with own.server.stopped(postmaster_only=True):
        wait_for(lambda: mem.db.monitor.not_accepting, BOUND_S, "db.not_accepting")
        began = time.monotonic()
        ready = client.get("/readyz")
        took = time.monotonic() - began
        served_meanwhile = client.get(FILE, headers=auth("alice"))
    assert ready.status_code == 200, ready.text
    assert ready.json()["database"] == "not_accepting"
    assert served_meanwhile.status_code == 200
    assert took < 3.0, took  # the new connection's 2 s, then nothing read
    wait_for(lambda: not mem.db.monitor.not_accepting, 15, "the postmaster to accept again")
    assert client.get("/readyz").json()["database"] == "ok"


def test_a_freeze_logs_its_connections_cut_once(own: Own, caplog: pytest.LogCaptureFixture) -> None:
    """A connection cut stays open to psycopg until it is used again: each later check of
    the same freeze cut it again and logged db.interrupted again."""
    engine = make_engine(own.server.url)
    watcher = DatabaseMonitor(engine, interval_s=60)  # the checks below are the test's
    caplog.set_level(logging.INFO, logger="memstrata.db.monitor")
    held = engine.connect()
    try:
        held.execute(text("SELECT 1"))
        with own.server.stopped():
            assert watcher.check_once() is not None and watcher.frozen
            assert watcher.check_once() is not None and watcher.frozen
        (cut,) = _events(caplog, "db.interrupted")
        assert cut["connections"] == 1
    finally:
        held.invalidate()
        held.close()
        watcher.stop()
        engine.dispose()


def test_a_connection_opened_meanwhile_is_closed_when_nobody_waits_for_it(own: Own) -> None:
    """The attempt left behind by a request that gave up closes what it gets: a freeze
    shorter than connect_timeout must not leave a connection open on the server."""
    engine = make_engine(own.server.url)
    watcher = DatabaseMonitor(engine, interval_s=60)
    admin = make_engine(own.server.url)
    try:
        with admin.connect() as conn:  # pooled before the freeze: counts the backends
            before = conn.execute(text("SELECT count(*) FROM pg_stat_activity")).scalar()
            errors: list[BaseException] = []

            def connect() -> None:
                try:
                    engine.connect().close()
                except Exception as exc:  # the 503's cause
                    errors.append(exc)

            with own.server.stopped():
                thread = threading.Thread(target=connect)
                thread.start()
                time.sleep(0.2)  # opening its connection
                assert watcher.check_once() is not None and watcher.frozen
                thread.join(5)
                assert not thread.is_alive() and len(errors) == 1
                assert "frozen" in str(errors[0])
            # The server runs again: the attempt connects, sees nobody waits, closes.
            wait_for(
                lambda: (
                    conn.execute(text("SELECT count(*) FROM pg_stat_activity")).scalar() == before
                ),
                15,
                "the abandoned attempt's connection to be closed",
            )
    finally:
        watcher.stop()
        engine.dispose()
        admin.dispose()

"""Writes whose statement is in flight when the server freezes answer at the monitor's
decision: before their COMMIT a 503 and nothing stored; with their COMMIT sent a 503 that
says the outcome is unknown (the server may commit it when it runs again). On a PostgreSQL
server of this module's own, frozen with SIGSTOP (``Server.stopped()``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import make_url

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_batch_turns import BATCH, _turn
from tests.api.test_frozen_database_outage import FILE, INTERVAL_S, Server
from tests.db.frozen import REFUSED_WITHIN_S
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

# The advisory lock a write's COMMIT waits for (the trigger below): held by the test.
COMMIT_LOCK = 4242
WAIT_AT_COMMIT = f"""
CREATE OR REPLACE FUNCTION test_wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock({COMMIT_LOCK}); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER test_wait_at_commit AFTER INSERT OR UPDATE ON user_memory
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_wait_at_commit();
"""
NO_WAIT_AT_COMMIT = """
DROP TRIGGER IF EXISTS test_wait_at_commit ON user_memory;
DROP FUNCTION IF EXISTS test_wait_at_commit();
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    embedded = EmbeddedPostgres(tmp_path_factory.mktemp("inflight"), database="memstrata_inflight")
    url = embedded.start()
    yield Server(embedded.pgdata, url)
    embedded.stop()


@pytest.fixture
def served(server: Server, settings: Settings) -> Iterator[tuple[Memstrata, TestClient]]:
    """The app on the module's server (BM25 only), its monitor checking every INTERVAL_S."""
    own = settings.model_copy(
        update={"database_url": server.url, "db_check_interval_s": INTERVAL_S}
    )
    mem = Memstrata.open(own)
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield mem, client
    finally:
        mem.close()


@contextmanager
def admin(server: Server) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own, outside the app's engine (never cut off)."""
    url = make_url(server.url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as conn:
        yield conn


def waiting_on_a_lock(conn: psycopg.Connection[Any], query: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        (query,),
    ).fetchone()
    return row is not None and row[0] > 0


class Call(threading.Thread):
    """One request on a thread of its own: its answer and when it came (time.time(), the
    clock of log records)."""

    def __init__(self, client: TestClient, method: str, path: str, **kw: Any) -> None:
        super().__init__(daemon=True)
        self.args = (client, method, path, kw)
        self.status = 0
        self.body: dict[str, Any] = {}
        self.answered = 0.0

    def run(self) -> None:
        client, method, path, kw = self.args
        response = client.request(method, path, **kw)
        self.answered = time.time()
        self.status, self.body = response.status_code, response.json()


def _decided(caplog: pytest.LogCaptureFixture) -> float:
    (lost,) = [r for r in caplog.records if event_fields(r).get("event") == "db.lost"]
    return lost.created


def _refusals(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    found = [event_fields(r) for r in caplog.records]
    return [f for f in found if f.get("event") == "http.error" and f.get("status") == 503]


def test_writes_in_flight_when_the_server_freezes_answer_at_the_decision(
    server: Server,
    served: tuple[Memstrata, TestClient],
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drill: writes in flight at a SIGSTOP answered 503 long after the monitor had found
    the server lost (a turn 8.7 s after the stop, a batch 15–16 s): a pooled connection's
    pre-ping cut off at the decision was replaced by a new connection, which waited out
    its 2 s, and so was every later step's."""
    mem, client = served
    first = client.put(FILE, headers=auth("alice"), json={"content": "# v1\n"})
    assert first.status_code == 200
    # Warm pooled connections, one for each write below: each pre-pings one in the freeze.
    held = [mem.db.engine.connect() for _ in range(mem.settings.db_pool_size)]
    for conn in held:
        conn.close()
    caplog.set_level(logging.INFO)
    with admin(server) as locker, admin(server) as watcher:
        # The PUT's UPDATE waits for this row lock: a statement inside its transaction.
        locker.execute("BEGIN")
        locker.execute("SELECT id FROM user_memory WHERE user_id = 'alice' FOR UPDATE")
        put = Call(client, "PUT", FILE, headers=auth("alice"), json={"content": "# v2\n"})
        put.start()
        wait_for(lambda: waiting_on_a_lock(watcher, "%user_memory%"), 10, "the PUT's lock")
        turn = _turn("s1", 0, "a turn about the harbour")
        turn.pop("session_id")
        single = Call(
            client, "POST", "/api/memory/conversations/s1/turns", headers=auth("bob"), json=turn
        )
        batch = Call(
            client,
            "POST",
            BATCH,
            headers=auth("carol"),
            json={"turns": [_turn("s2", i, f"turn {i} of the batch") for i in range(3)]},
        )
        calls = [put, single, batch]
        with server.stopped():
            single.start()
            batch.start()
            for call in calls:
                call.join(20)
        locker.execute("ROLLBACK")
    decided = _decided(caplog)
    answers = [(c.status, c.body.get("code"), round(c.answered - decided, 2)) for c in calls]
    assert [a[:2] for a in answers] == [(503, "database_unavailable")] * 3, answers
    assert all(a[2] < REFUSED_WITHIN_S for a in answers), answers
    # Each logged once, with its user and the monitor's cause.
    refused = _refusals(caplog)
    assert sorted(str(e["user_id"]) for e in refused) == ["alice", "bob", "carol"], refused
    assert all("db.lost" in str(e["detail"]) for e in refused), refused
    wait_for(lambda: mem.db.up() is True, 15, "the monitor to find the database up")
    # Nothing stored, and every write works again on the pool.
    stored = client.get(FILE, headers=auth("alice")).json()
    assert (stored["content"], stored["version"]) == ("# v1\n", first.json()["version"])
    again = client.post("/api/memory/conversations/s1/turns", headers=auth("bob"), json=turn)
    assert again.status_code == 200 and again.json()["inserted"] > 0, again.text
    body = {"turns": [_turn("s2", i, f"turn {i} of the batch") for i in range(3)]}
    batch_again = client.post(BATCH, headers=auth("carol"), json=body)
    assert batch_again.status_code == 200 and batch_again.json()["inserted"] == 3
    put_again = client.put(FILE, headers=auth("alice"), json={"content": "# v2\n"})
    assert put_again.status_code == 200, put_again.text


def test_a_write_whose_commit_is_in_flight_says_its_outcome_is_unknown(
    server: Server,
    served: tuple[Memstrata, TestClient],
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A COMMIT sent before the freeze may be carried out when the server runs again: a
    503 that read as "not stored" would have the client write again what is stored."""
    mem, client = served
    first = client.put(FILE, headers=auth("dora"), json={"content": "# v1\n"})
    assert first.status_code == 200
    caplog.set_level(logging.INFO)
    with admin(server) as locker, admin(server) as watcher:
        locker.execute(WAIT_AT_COMMIT)
        try:
            locker.execute("SELECT pg_advisory_lock(%s)", (COMMIT_LOCK,))
            put = Call(client, "PUT", FILE, headers=auth("dora"), json={"content": "# v2\n"})
            put.start()
            wait_for(lambda: waiting_on_a_lock(watcher, "COMMIT"), 10, "the PUT's COMMIT")
            with server.stopped():
                put.join(20)
            locker.execute("SELECT pg_advisory_unlock(%s)", (COMMIT_LOCK,))
        finally:
            locker.execute(NO_WAIT_AT_COMMIT)
    assert put.status == 503 and put.body["code"] == "database_unavailable", put.body
    assert put.body["outcome"] == "unknown", put.body
    assert "may or may not be stored" in put.body["detail"], put.body
    assert put.answered - _decided(caplog) < REFUSED_WITHIN_S
    (refused,) = _refusals(caplog)
    assert refused["user_id"] == "dora" and refused["error"] == "CommitOutcomeUnknownError"
    assert "db.lost" in str(refused["detail"]), refused
    wait_for(lambda: mem.db.up() is True, 15, "the monitor to find the database up")
    # The server carried the COMMIT out once it ran again: stored, whole.
    stored = client.get(FILE, headers=auth("dora")).json()
    assert (stored["content"], stored["version"]) == ("# v2\n", first.json()["version"] + 1)
    again = client.put(FILE, headers=auth("dora"), json={"content": "# v2\n"})
    assert again.status_code == 200 and again.json().get("unchanged") is True, again.text

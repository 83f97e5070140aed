"""What an operator's walkthrough of ``memstrata serve`` found missing or misleading in the
service's metrics and logs.

- The backlog gauges kept their last value while the count could not be read (the
  database down, the table locked): a replica showed 1,200 rows pending through an outage,
  another one, never scraped while the database answered, 0. Now no sample.
- Every counter doubled the series count with a ``_created`` series; the latency
  histogram ended at 10 s, below an inline batch import's 21 s.
- ``database_unavailable`` 503s said "try again shortly" without ``Retry-After``.
- Log events of a request's work (``index.updated``, ``embedding.failed``) named the user
  but not the request; every probe and scrape was an INFO line (128 of 750 in 2 minutes).

Real PostgreSQL (a lock held on the table is the fault), the fake embedding API of
``tests/retrieval/fault_server`` where an API is needed.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from memstrata.api import create_app
from memstrata.api.errors import DATABASE_RETRY_AFTER_S
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import make_session_factory
from memstrata.logs import event_fields
from memstrata.retrieval.records import NewChunk
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.db.read_only import login_role
from tests.retrieval.fault_server import FaultServer
from tests.retrieval.stored import insert_rows

pytestmark = pytest.mark.timeout(120)

ROLE = "memstrata_observed"
FILE = "/api/config/agent-files/user"
NOWHERE = "postgresql+psycopg://nobody@/none?host=/nonexistent"  # the database is down
BACKLOG = re.compile(
    r"^memstrata_embeddings_(pending|pending_oldest_seconds|failed) ", re.MULTILINE
)


@contextmanager
def table_locked(db: Database) -> Iterator[None]:
    """``memory_embeddings`` locked by another connection, as a migration or a maintenance
    statement holds it: the backlog count gives up after its statement timeout."""
    conn = db.engine.connect()
    try:
        conn.execute(text("LOCK TABLE memory_embeddings IN ACCESS EXCLUSIVE MODE"))
        yield
    finally:
        conn.rollback()
        conn.close()


def _backlog_samples(client: TestClient) -> dict[str, str]:
    body = client.get("/metrics").text
    return {
        m.group(1): line.split()[-1]
        for line in body.splitlines()
        if (m := BACKLOG.match(line + " "))
    }


def test_backlog_gauges_have_no_sample_while_the_count_cannot_be_read(
    settings: Settings, db: Database
) -> None:
    pending = NewChunk("sessions/s1/0", 0, "alice keeps bees", "h0")  # no vector yet
    insert_rows(db, "alice", [pending])
    with FaultServer() as fake:
        mem = Memstrata.open(fake.as_api_of(settings), database=db)
        try:
            client = TestClient(create_app(memstrata=mem))  # no lifespan: no worker heals
            with table_locked(db):
                # Never read yet: no sample, not 0 (the reviewer's replica C).
                assert _backlog_samples(client) == {}
            samples = _backlog_samples(client)
            assert (samples["pending"], samples["failed"]) == ("1.0", "0.0")
            assert float(samples["pending_oldest_seconds"]) >= 0
            with table_locked(db):
                # Read once, then unreadable: no sample, not the last value (replica B).
                body = client.get("/metrics").text
                assert BACKLOG.search(body) is None, body
                # The circuits are this process's own state: still reported.
                assert 'memstrata_embedding_circuit_open{kind="passage"} 0.0' in body
            assert _backlog_samples(client)["pending"] == "1.0"
        finally:
            mem.close()


def test_counters_have_no_created_series_and_latency_buckets_reach_a_minute(
    client: TestClient, auth: AuthHeader
) -> None:
    client.get("/api/config/skills", headers=auth("alice"))
    client.post("/api/memory/search", headers=auth("alice"), json={"query": "hello"})
    body = client.get("/metrics").text
    assert "_created" not in body
    assert "memstrata_http_requests_total{" in body  # the counters themselves stay
    bucket = 'memstrata_http_request_duration_seconds_bucket{le="60.0",method="GET",'
    assert bucket in body


def test_a_database_unavailable_503_says_when_to_retry(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    """The database goes away under a running server: its connections are ended and new
    ones refused."""
    grants = ["ALL ON ALL TABLES IN SCHEMA public", "ALL ON ALL SEQUENCES IN SCHEMA public"]
    with login_role(db.engine, ROLE, grants) as url:
        mem = Memstrata.open(settings.model_copy(update={"database_url": url}))
        try:
            client = TestClient(create_app(memstrata=mem))
            assert client.get(FILE, headers=auth("dora")).status_code == 200
            with db.engine.begin() as conn:
                conn.execute(text(f"ALTER ROLE {ROLE} NOLOGIN"))
                conn.execute(
                    text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE usename = :role"),
                    {"role": ROLE},
                )  # fmt: skip
            response = client.get(FILE, headers=auth("dora"))
        finally:
            mem.close()
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "database_unavailable"
    assert response.headers["retry-after"] == str(DATABASE_RETRY_AFTER_S)


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [f for f in map(event_fields, caplog.records) if f.get("event") == name]


def test_events_of_a_requests_work_carry_its_request_id(
    client: TestClient, mem: Memstrata, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    turn = {"turn_index": 0, "user_message": "my kayak is red", "assistant_reply": "noted"}
    with caplog.at_level(logging.INFO, logger="memstrata"):
        # A sync route: its work runs on a worker thread.
        answered = client.post(
            "/api/memory/conversations/s1/turns",
            headers={**auth("alice"), "X-Request-ID": "trace-7"},
            json=turn,
        )
        assert answered.status_code == 200, answered.text
        # Outside any request: no request id.
        mem.indexer.index_turn("alice", "s1", 1, "and my paddle is blue", "noted")
    first, second = _events(caplog, "index.updated")
    assert first["request_id"] == "trace-7" and first["user_id"] == "alice"
    assert "request_id" not in second


def test_a_search_whose_query_embedding_fails_names_the_request(
    settings: Settings, db: Database, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    with FaultServer("500") as fake:
        mem = Memstrata.open(fake.as_api_of(settings), database=db)
        try:
            client = TestClient(create_app(memstrata=mem))
            with caplog.at_level(logging.WARNING, logger="memstrata"):
                found = client.post(
                    "/api/memory/search",
                    headers={**auth("alice"), "X-Request-ID": "search-3"},
                    json={"query": "kayaks"},
                )
            assert found.status_code == 200, found.text
        finally:
            mem.close()
    [failed] = _events(caplog, "search.embedding_failed")
    assert failed["request_id"] == "search-3"


def test_probes_and_scrapes_are_logged_at_debug_unless_they_fail(
    mem: Memstrata, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="memstrata.api.access"):
        for path in ("/healthz", "/readyz", "/metrics"):
            assert client.get(path).status_code == 200
        assert client.get("/api/config/skills").status_code == 401
    levels = {
        f["path"]: r.levelno
        for r in caplog.records
        if (f := event_fields(r)).get("event") == "http.request"
    }
    assert levels == {
        "/healthz": logging.DEBUG,
        "/readyz": logging.DEBUG,
        "/metrics": logging.DEBUG,
        "/api/config/skills": logging.INFO,
    }
    caplog.clear()
    engine = create_engine(NOWHERE)
    broken = dataclasses.replace(mem, db=Database(engine, make_session_factory(engine)))
    try:
        with (
            caplog.at_level(logging.INFO, logger="memstrata.api.access"),
            TestClient(create_app(memstrata=broken)) as failing,
        ):
            assert failing.get("/readyz").status_code == 503
    finally:
        engine.dispose()
    [unready] = [r for r in caplog.records if event_fields(r).get("path") == "/readyz"]
    assert unready.levelno == logging.WARNING

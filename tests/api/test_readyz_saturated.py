"""/readyz when PostgreSQL refuses new connections because every slot is taken.

A real refusal: a role limited to one connection (PostgreSQL's per-role
``CONNECTION LIMIT``, the same SQLSTATE 53300 as a full ``max_connections``), whose one
connection this process's pool already holds."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from memstrata.api import create_app
from memstrata.api.probes import PoolProgress, stuck
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import POOL_TIMEOUT_S
from memstrata.runtime import Memstrata

ROLE = "memstrata_one_slot"


@pytest.fixture
def one_slot_url(db: Database) -> Iterator[str]:
    with db.engine.begin() as conn:
        conn.execute(text(f"CREATE ROLE {ROLE} LOGIN CONNECTION LIMIT 1"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {ROLE}"))
        conn.execute(text(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {ROLE}"))
        conn.execute(text(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {ROLE}"))
    url = make_url(db.engine.url).set(username=ROLE, password=None)
    yield url.render_as_string(hide_password=False)
    with db.engine.begin() as conn:
        conn.execute(text(f"DROP OWNED BY {ROLE}"))
        conn.execute(text(f"DROP ROLE {ROLE}"))


def test_a_server_with_no_free_slot_is_saturated_not_unready(
    settings: Settings, one_slot_url: str
) -> None:
    """It answered 503 (a fresh connection was refused) although the pool's connection
    worked: every replica of a full server left the load balancer at once."""
    capped = settings.model_copy(update={"database_url": one_slot_url, "migrate_on_start": False})
    mem = Memstrata.open(capped)  # the schema check leaves its connection in the pool
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            answer = client.get("/readyz")
        assert answer.status_code == 200, answer.text
        assert answer.json()["database"] == "saturated"
        assert answer.json()["status"] == "ready"
    finally:
        mem.close()


def test_a_process_whose_pool_is_all_in_use_is_saturated_at_once(
    settings: Settings, db: Database
) -> None:
    """Its pgvector check waited POOL_TIMEOUT_S (10 s) for a pooled connection, then
    answered 503 "unreachable" although a fresh connection had just answered: requests
    queued on one user's lock took every replica out of the load balancer."""
    del db  # the schema
    mem = Memstrata.open(settings.model_copy(update={"db_pool_size": 1}))  # 1 + 2 overflow
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            free = client.get("/readyz").json()
            held = [mem.db.engine.connect() for _ in range(3)]
            try:
                started = time.monotonic()
                answer = client.get("/readyz")
                took_s = time.monotonic() - started
            finally:
                for connection in held:
                    connection.close()
            after = client.get("/readyz").json()
    finally:
        mem.close()
    assert answer.status_code == 200, answer.text
    assert took_s < POOL_TIMEOUT_S / 5, took_s
    body = answer.json()
    assert (body["status"], body["database"], body["vectors"]) == ("ready", "saturated", "unknown")
    assert body["pgvector"] == free["pgvector"]  # the version the last pooled check found
    assert (after["status"], after["database"]) == ("ready", "ok")


def test_a_pool_whose_checkouts_only_time_out_is_not_ready(
    settings: Settings, db: Database
) -> None:
    """Ready while its pool was full, always: a process whose connections leaked or hung
    stayed in the load balancer for ever, every request waiting 10 s for a 503. Stuck is
    a full pool whose checkouts, since the last probe, timed out and none got one."""
    del db
    mem = Memstrata.open(settings.model_copy(update={"db_pool_size": 1}))  # 1 + 2 overflow
    pool = mem.db.engine.pool
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            held = [mem.db.engine.connect() for _ in range(3)]
            try:
                busy = client.get("/readyz")  # full, nothing timed out yet: just busy
                pool._timeout = 0.2  # type: ignore[attr-defined]  # SQLAlchemy's, for speed
                with pytest.raises(PoolTimeoutError):
                    mem.db.engine.connect()
                stuck = client.get("/readyz")
                again = client.get("/readyz")  # no checkout since: no new timeout either
            finally:
                for connection in held:
                    connection.close()
            after = client.get("/readyz")
    finally:
        mem.close()
    assert (busy.status_code, busy.json()["database"]) == (200, "saturated")
    assert (stuck.status_code, stuck.json()["database"]) == (503, "pool_exhausted")
    assert again.status_code == 200  # one probe's evidence, not a latch
    assert (after.status_code, after.json()["database"]) == (200, "ok")


def test_stuck_needs_timeouts_and_no_checkout_served() -> None:
    assert not stuck(None, PoolProgress(0, 1))
    assert not stuck(PoolProgress(5, 0), PoolProgress(5, 0))  # full, nothing timed out
    assert not stuck(PoolProgress(5, 0), PoolProgress(6, 1))  # slow, but it serves
    assert stuck(PoolProgress(5, 0), PoolProgress(5, 2))

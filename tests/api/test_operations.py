"""/healthz and /readyz: what the probes answer, a flood of them, the database or pgvector
missing, a 5xx's log line."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from memstrata import package_version
from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import make_session_factory
from memstrata.db.migrate import schema_head
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz(client: TestClient, mem: Memstrata) -> None:
    with mem.db.engine.connect() as conn:
        version = conn.execute(
            text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        ).scalar()
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "database": "ok",
        "pgvector": version,
        "vectors": "off",  # no embedding API in this runtime
        "pending": None,
        "embedding": "off",
        # which code answers, for a rolling upgrade (as `memstrata --version`)
        "release": package_version(),
        "schema_head": schema_head(),
    }


def test_a_flood_of_probes_runs_one_computation_at_a_time(
    open_runtime: Callable[..., Memstrata], monkeypatch: pytest.MonkeyPatch
) -> None:
    """/readyz and /metrics need no token, so a flood of them must not multiply database
    work: requests that arrive while one computation runs share its answer (100 /metrics
    connections took another user's searches from 6 ms to 4 s before)."""
    mem = open_runtime()
    probes = 0
    real_probe = mem.db.probe

    def slow_probe() -> str | None:
        nonlocal probes
        probes += 1
        time.sleep(0.3)  # a database under load: the window the flood arrives in
        return real_probe()

    monkeypatch.setattr(mem.db, "probe", slow_probe)
    app = create_app(memstrata=mem)
    renders = 0
    real_render = app.state.context.metrics.render

    def counted_render() -> tuple[bytes, str]:
        nonlocal renders
        renders += 1
        time.sleep(0.3)
        return real_render()

    monkeypatch.setattr(app.state.context.metrics, "render", counted_render)

    async def flood() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            asks = [client.get("/readyz") for _ in range(30)]
            asks += [client.get("/metrics") for _ in range(30)]
            return await asyncio.gather(*asks)

    answers = asyncio.run(flood())
    assert [a.status_code for a in answers] == [200] * 60
    assert all(a.json()["status"] == "ready" for a in answers[:30])
    assert all(b"memstrata_" in a.content for a in answers[30:])
    assert probes <= 3, f"{probes} database probes for 30 concurrent /readyz"
    assert renders <= 3, f"{renders} renders for 30 concurrent /metrics"
    # Alone, each request still gets a fresh computation.
    with TestClient(app) as client:
        before = probes
        client.get("/readyz")
        client.get("/readyz")
    assert probes == before + 2


def _runtime_on(settings: Settings, mem: Memstrata, url: str) -> Memstrata:
    engine = create_engine(url)
    return dataclasses.replace(mem, db=Database(engine, make_session_factory(engine)))


def test_readyz_database_unreachable(settings: Settings, mem: Memstrata) -> None:
    broken = _runtime_on(settings, mem, "postgresql+psycopg://nobody@/none?host=/nonexistent")
    with TestClient(create_app(memstrata=broken)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "database": "unreachable",
        "pgvector": "unknown",
        "vectors": "unknown",
        "pending": None,
        "embedding": "unknown",
        "release": package_version(),
        "schema_head": schema_head(),
    }
    broken.db.engine.dispose()


def test_a_5xx_is_logged_with_its_cause_and_whose_request_it_was(
    mem: Memstrata,
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def database_down(*_args: object, **_kwargs: object) -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(mem.sync, "read_file", database_down)
    with TestClient(create_app(memstrata=mem)) as client, caplog.at_level(logging.WARNING):
        response = client.get("/api/config/agent-files/user", headers=auth("dora"))
    assert response.status_code == 503, response.text
    [cause] = [event_fields(r) for r in caplog.records if r.getMessage() == "http.error"]
    assert cause["status"] == 503 and cause["error"] == "OperationalError"
    assert cause["user_id"] == "dora"
    assert cause["request_id"] == response.headers["x-request-id"]
    assert (cause["method"], cause["path"]) == ("GET", "/api/config/agent-files/user")


def test_readyz_pgvector_missing(settings: Settings, mem: Memstrata, pg_url: str) -> None:
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("DROP DATABASE IF EXISTS api_no_pgvector"))
        conn.execute(text("CREATE DATABASE api_no_pgvector"))
    url = make_url(pg_url).set(database="api_no_pgvector").render_as_string(hide_password=False)
    bare = _runtime_on(settings, mem, url)
    try:
        with TestClient(create_app(memstrata=bare)) as client:
            response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json() == {
            "status": "unavailable",
            "database": "ok",
            "pgvector": "missing",
            "vectors": "unknown",
            "pending": None,
            "embedding": "unknown",
            "release": package_version(),
            "schema_head": schema_head(),
        }
    finally:
        bare.db.engine.dispose()
        with admin.connect() as conn:
            conn.execute(text("DROP DATABASE api_no_pgvector"))
        admin.dispose()

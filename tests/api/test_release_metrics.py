"""``/metrics`` says which release runs (``memstrata_build_info``) and whether the database
monitor reaches the database (``memstrata_database_up``); the start-up log names the
release.

The review (M6, M7) found neither: the release was nowhere, and during a database outage
``/metrics`` kept answering its last values, so a Prometheus-only on-call saw a healthy
replica. The outage here is real: the runtime's role is refused new connections
(``NOLOGIN``), which the monitor's fresh-connection check sees as a lost database.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from importlib.metadata import version

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import head_revision
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.db.read_only import login_role

ROLE = "memstrata_monitored"
UP = re.compile(r"^memstrata_database_up (\S+)$", re.MULTILINE)


def test_build_info_names_the_release_and_its_schema(client: TestClient, mem: Memstrata) -> None:
    body = client.get("/metrics").text
    head = head_revision(mem.db.engine)
    line = f'memstrata_build_info{{schema_head="{head}",version="{version("memstrata")}"}} 1.0'
    assert line in body.splitlines()


def test_the_start_up_log_line_names_the_release(
    mem: Memstrata, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="memstrata.api.app"),
        TestClient(create_app(memstrata=mem)),
    ):
        pass
    [started] = [event_fields(r) for r in caplog.records if r.getMessage() == "server.started"]
    assert started == {
        "event": "server.started",
        "version": version("memstrata"),
        "schema_head": head_revision(mem.db.engine),
    }


@pytest.fixture
def monitored(settings: Settings, db: Database) -> Iterator[tuple[Memstrata, Database]]:
    grants = ["ALL ON ALL TABLES IN SCHEMA public", "ALL ON ALL SEQUENCES IN SCHEMA public"]
    with login_role(db.engine, ROLE, grants) as url:
        mem = Memstrata.open(settings.model_copy(update={"database_url": url}))
        try:
            yield mem, db
        finally:
            mem.close()


def _up(client: TestClient) -> str | None:
    found = UP.search(client.get("/metrics").text)
    return found.group(1) if found else None


def _until(client: TestClient, wanted: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while (seen := _up(client)) != wanted:
        assert time.monotonic() < deadline, f"memstrata_database_up is {seen}, not {wanted}"
        time.sleep(0.2)


def _alter(db: Database, clause: str) -> None:
    with db.engine.begin() as conn:
        conn.execute(text(f"ALTER ROLE {ROLE} {clause}"))


def test_database_up_follows_the_monitor_through_an_outage(
    monitored: tuple[Memstrata, Database], caplog: pytest.LogCaptureFixture
) -> None:
    mem, admin = monitored
    with TestClient(create_app(memstrata=mem)) as client:  # the lifespan starts the monitor
        assert _up(client) == "1.0"
        with caplog.at_level(logging.INFO, logger="memstrata.db.monitor"):
            _alter(admin, "NOLOGIN")  # new connections refused: the monitor's are
            _until(client, "0.0")
            _alter(admin, "LOGIN")
            _until(client, "1.0")
        events = [r.getMessage() for r in caplog.records if r.name == "memstrata.db.monitor"]
        assert events == ["db.lost", "db.recovered"]


def test_a_saturated_database_is_still_up(
    monitored: tuple[Memstrata, Database], caplog: pytest.LogCaptureFixture
) -> None:
    """Every connection slot taken is not an outage (the pool still works; /readyz stays
    ready), so the gauge stays 1."""
    mem, admin = monitored
    with TestClient(create_app(memstrata=mem)) as client:
        _alter(admin, "CONNECTION LIMIT 0")
        deadline = time.monotonic() + 30
        while not mem.db.monitor.saturated:
            assert time.monotonic() < deadline, "the monitor never saw the saturation"
            time.sleep(0.2)
        assert _up(client) == "1.0"
        _alter(admin, "CONNECTION LIMIT -1")


def test_no_sample_while_nothing_watches(mem: Memstrata) -> None:
    """Without the lifespan (a host that never starts the background work) no monitor
    runs: no sample rather than a stale 1."""
    client = TestClient(create_app(memstrata=mem))
    assert _up(client) is None
    assert "memstrata_build_info{" in client.get("/metrics").text

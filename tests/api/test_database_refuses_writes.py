"""A database that refuses this server's writes after it started: a 503 with its own code
and one log line naming the cause and the fix, never a 500 with two tracebacks.

Real refusals on the session's server: a role's grants revoked (SQLSTATE 42501), a role
made read-only (25006) and a real hot standby (25006; a replica whose URL now reaches a
demoted server). Start-up refuses all three (tests/db/test_write_access.py); these are
what a process that started before the change sees.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.db.read_only import hot_standby, login_role

FILE = "/api/config/agent-files/user"
TURN = "/api/memory/conversations/s1/turns"
ROLE = "memstrata_loses_grants"
GRANTS = ["ALL ON ALL TABLES IN SCHEMA public", "ALL ON ALL SEQUENCES IN SCHEMA public"]


@contextmanager
def serving(mem: Memstrata) -> Iterator[TestClient]:
    """``mem`` served without raising the server's exceptions, and closed after."""
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield client
    finally:
        mem.close()


def _writes_refused(
    client: TestClient, auth: AuthHeader, caplog: pytest.LogCaptureFixture, user: str
) -> list[dict[str, Any]]:
    """A PUT, a turn and a new user's first GET (which provisions the user): each a 503
    ``database_read_only``; returns the log lines at WARNING and above."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        answers = [
            client.put(FILE, headers=auth(user), json={"content": "# User\n\nlikes tea\n"}),
            client.post(
                TURN,
                headers=auth(user),
                json={"turn_index": 0, "user_message": "hi", "assistant_reply": "hello"},
            ),
            client.get(FILE, headers=auth("someone-new")),
        ]
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "database_read_only"
        assert (
            answer.json()["detail"] == "the database refuses this server's writes; try again later"
        )
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.exc_info is None for r in records), "a traceback was logged"
    assert not any("unhandled error" in r.getMessage() for r in records)
    return [event_fields(r) for r in records if r.name == "memstrata.api.errors"]


def test_revoked_grants_are_a_503_logged_once_with_the_grant_to_run(
    settings: Settings, db: Database, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    with login_role(db.engine, ROLE, GRANTS) as url:
        mem = Memstrata.open(settings.model_copy(update={"database_url": url}))
        with serving(mem) as client:
            assert client.get(FILE, headers=auth("alice")).status_code == 200  # provisioned
            with db.engine.begin() as conn:  # e.g. grants lost in a restore, then a reload
                conn.execute(
                    text(
                        f"REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public FROM {ROLE}"
                    )
                )
            lines = _writes_refused(client, auth, caplog, "alice")
            assert client.get(FILE, headers=auth("alice")).status_code == 200  # reads work
    assert len(lines) == 3  # one per request
    for line in lines:
        assert line["event"] == "http.error" and line["status"] == 503
        assert line["error"] == "InsufficientPrivilege"
        assert line["detail"].startswith("permission denied for table ")
        assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES" in line["hint"]
    assert [r.levelname for r in caplog.records if r.name == "memstrata.api.errors"] == [
        "ERROR"
    ] * 3


def test_a_role_made_read_only_is_a_503(
    settings: Settings, db: Database, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    with login_role(db.engine, ROLE, GRANTS) as url:
        mem = Memstrata.open(settings.model_copy(update={"database_url": url}))
        with serving(mem) as client:
            with db.engine.begin() as conn:
                conn.execute(text(f"ALTER ROLE {ROLE} SET default_transaction_read_only = on"))
            mem.db.engine.dispose()  # new sessions take the role's setting
            lines = _writes_refused(client, auth, caplog, "alice")
    assert {line["error"] for line in lines} == {"ReadOnlySqlTransaction"}
    assert all("default_transaction_read_only" in line["hint"] for line in lines)


def test_a_hot_standby_is_a_503_naming_the_primary(
    settings: Settings, pg_url: str, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    with hot_standby(pg_url) as standby:
        engine = make_engine(standby)
        # Opened without the start-up check, which refuses a standby: as a process sees a
        # server that was demoted under it.
        mem = Memstrata.open(settings, database=Database(engine, make_session_factory(engine)))
        try:
            with serving(mem) as client:
                lines = _writes_refused(client, auth, caplog, "alice")
        finally:
            engine.dispose()
    assert {line["error"] for line in lines} == {"ReadOnlySqlTransaction"}
    assert all("point MEMSTRATA_DATABASE_URL at the primary" in line["hint"] for line in lines)

"""SIGTERM with a request in flight: ``memstrata serve`` waits ``MEMSTRATA_SHUTDOWN_GRACE_S``
for it; one still running after that gets a JSON 503 with Retry-After, never uvicorn's
plain-text 500. The cut-off request's worker thread runs on; serve waits for it (up to
``after_grace_s``) before it closes the runtime the thread uses, and then exits without it.

A real server process on the session's PostgreSQL. The embedding API is the
fault-injection fake in its slow mode, so an inline batch import takes as long as the test
needs: longer than the grace (cut off) or shorter (answered).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memstrata.api.shutdown import RETRY_AFTER_S, SHUTTING_DOWN
from memstrata.db.database import Database
from tests.api.auth import signed
from tests.log_lines import events_in
from tests.retrieval.fault_server import FaultServer
from tests.served import Served, serve_logged

pytestmark = pytest.mark.timeout(90)

SECRET = "shutdown-test-secret-that-is-long-enough-0123"
BATCH = "/api/memory/conversations/turns:batch"
TURNS = 4  # one embedding request of TURNS texts (the default batch size is 8)


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


@contextmanager
def serving(
    tmp_path: Path,
    pg_url: str,
    fake: FaultServer,
    grace_s: int,
    *,
    secret: str = SECRET,
    **settings: str,
) -> Iterator[Served]:
    """``memstrata serve`` on the session's PostgreSQL with ``fake`` as its embedding API,
    JSON logs at INFO, tokens signed with ``secret``, and ``settings``
    (``EMBEDDING_BATCH_SIZE="2"`` for ``MEMSTRATA_EMBEDDING_BATCH_SIZE``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_JWT_SECRET": secret,
        "MEMSTRATA_EMBEDDING_BASE_URL": fake.base_url,
        "MEMSTRATA_EMBEDDING_MODEL": "fake-model",
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_SHUTDOWN_GRACE_S": str(grace_s),
        "MEMSTRATA_LOG_JSON": "true",
        "MEMSTRATA_LOG_LEVEL": "INFO",
        **{f"MEMSTRATA_{name}": value for name, value in settings.items()},
    }
    with serve_logged(env, tmp_path / "serve.log") as served:
        yield served


def _batch(user: str, turns: int) -> tuple[dict[str, Any], dict[str, str]]:
    body = [
        {"session_id": "s1", "turn_index": i, "user_message": f"turn {i} about kayaks"}
        for i in range(turns)
    ]
    return {"turns": body}, signed(user, SECRET)


def _import_during_sigterm(
    served: Served, fake: FaultServer, user: str, turns: int = TURNS
) -> httpx.Response:
    """POST a batch import, send SIGTERM while its embedding call is under way, and return
    the answer."""
    body, headers = _batch(user, turns)
    asked = len(fake.requests)
    fake.mode = "slow"
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.post, served.url + BATCH, json=body, headers=headers, timeout=30)
        deadline = time.monotonic() + 10
        while len(fake.requests) == asked and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fake.requests) > asked, "the import never called the embedding API"
        served.process.send_signal(signal.SIGTERM)
        return answer.result(timeout=30)


def _stored_paths(db: Database, user: str) -> set[str]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT DISTINCT file_path FROM memory_embeddings WHERE user_id = :u"),
            {"u": user},
        )
        return {row[0] for row in rows}


ALL_PATHS = {f"sessions/s1/{i}" for i in range(TURNS)}


def test_a_request_outlasting_the_grace_gets_a_json_503(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    fake.delay_s = 1.0  # per text: the import embeds for TURNS s, the grace is 1 s
    with serving(tmp_path, pg_url, fake, grace_s=1) as served:
        began = time.monotonic()
        response = _import_during_sigterm(served, fake, "ana")
        waited = time.monotonic() - began

        assert response.status_code == 503, response.text
        assert response.headers["content-type"] == "application/json"
        assert response.headers["retry-after"] == str(RETRY_AFTER_S)
        assert response.headers["x-request-id"]
        assert response.json() == {
            "code": "shutting_down",
            "detail": SHUTTING_DOWN,
            "message": SHUTTING_DOWN,
        }
        assert waited < TURNS * fake.delay_s, "answered after the embedding: nothing was cut off"

        assert served.process.wait(timeout=30) == 0, served.stderr()
        cut = served.events("http.cut_off_by_shutdown")
        assert [(e["method"], e["path"], e["user_id"]) for e in cut] == [("POST", BATCH, "ana")]
        assert cut[0]["request_id"] == response.headers["x-request-id"]
        logged = [e["status"] for e in served.events("http.request") if e["path"] == BATCH]
        assert logged == [503], served.stderr()
        assert "Exception in ASGI application" not in served.log.read_text()
        # The shutdown is told when it starts, and the grace's end is a WARNING of ours
        # that says it is expected, not uvicorn's ERROR.
        [started] = served.events("shutdown.started")
        assert started["signal"] == "SIGTERM"
        assert (started["grace_s"], started["after_grace_s"], started["requests_in_flight"]) == (
            1,
            13,
            1,
        )
        [ended] = served.events("shutdown.grace_ended")
        assert (ended["level"], ended["requests"], ended["grace_s"]) == ("warning", 1, 1)
        errors = [e for e in events_in(served.log) if e["level"] in ("error", "critical")]
        assert errors == [], served.stderr()
    # The import's worker thread ran on after the 503; its one transaction stored all of
    # the turns or none of them.
    assert _stored_paths(db, "ana") in (set(), ALL_PATHS)


def test_a_request_finishing_within_the_grace_is_answered(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    fake.delay_s = 0.2  # per text: the import embeds for 0.8 s, the grace is 5 s
    with serving(tmp_path, pg_url, fake, grace_s=5) as served:
        response = _import_during_sigterm(served, fake, "bo")

        assert response.status_code == 200, response.text
        assert response.json()["turns"] == TURNS
        assert response.json()["embedding_failed"] == 0
        assert served.process.wait(timeout=30) == 0, served.stderr()
        assert served.events("http.cut_off_by_shutdown") == []
    assert _stored_paths(db, "bo") == ALL_PATHS


def _vectors(db: Database, user: str) -> int:
    with db.engine.connect() as conn:
        query = (
            "SELECT count(*) FROM memory_embeddings WHERE user_id = :u AND embedding IS NOT NULL"
        )
        return int(conn.execute(text(query), {"u": user}).scalar_one())


def test_a_cut_off_import_ends_before_the_runtime_is_closed(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    """serve used to close the runtime (embedding client, database engine) right after the
    grace, under the import's thread, which then failed. Now it waits for the thread:
    the embedding call ends 2 s after the cut-off, well within after_grace_s (13 s)."""
    fake.delay_s = 0.75  # per text: the import embeds for 3 s, the grace is 1 s
    with serving(tmp_path, pg_url, fake, grace_s=1) as served:
        response = _import_during_sigterm(served, fake, "cy")
        assert response.status_code == 503, response.text
        assert served.process.wait(timeout=30) == 0, served.stderr()
        assert _stored_paths(db, "cy") == ALL_PATHS, served.stderr()
        assert _vectors(db, "cy") == TURNS
        [waited] = served.events("shutdown.request_threads")
        assert waited["abandoned"] == [], served.stderr()
        # The request the thread served, not a Python name (build_router.<locals>....).
        assert waited["finished"] == [{"method": "POST", "route": BATCH, "user_id": "cy"}]
        assert waited["limit_s"] == 13


LIMIT_SETTINGS = {  # after_grace_s = 1 + 1 x 2 = 3 s
    "EMBEDDING_TIMEOUT_S": "1",
    "EMBEDDING_TIMEOUT_PER_TEXT_S": "1",
    "EMBEDDING_BATCH_SIZE": "2",
}


def _cut_off_then_stopped(
    served: Served, fake: FaultServer, user: str, turns: int
) -> tuple[dict[str, Any], float]:
    """An import cut off by SIGTERM (503), then a clean exit: the one
    ``shutdown.request_threads`` event and the seconds from the 503 to the exit."""
    response = _import_during_sigterm(served, fake, user, turns=turns)
    stopping = time.monotonic()
    assert response.status_code == 503, response.text
    assert served.process.wait(timeout=30) == 0, served.stderr()
    exited_s = time.monotonic() - stopping
    [waited] = served.events("shutdown.request_threads")
    return waited, exited_s


def test_a_cut_off_import_stores_its_text_when_its_embeddings_would_outlast_the_limit(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    """Three batches of 2.4 s each against a limit of 3 s: the import still had two
    embedding calls to make when the grace passed. serve sends no more passage embeddings
    then, so the batch in flight ends, the other turns are stored without a vector (healed
    later, like any embedding failure) and the import commits within the limit. Before,
    its later batches queued behind the slow API and the thread was abandoned at the
    limit, storing nothing."""
    fake.delay_s = 1.2  # per text
    turns, limit_s = 6, 3
    with serving(tmp_path, pg_url, fake, grace_s=1, **LIMIT_SETTINGS) as served:
        waited, exited_s = _cut_off_then_stopped(served, fake, "di", turns)
        assert waited["abandoned"] == [], served.stderr()
        assert waited["finished"] == [{"method": "POST", "route": BATCH, "user_id": "di"}]
        assert waited["limit_s"] == limit_s
        failed = [e for e in served.events("embedding.failed") if e["user_id"] == "di"]
        assert failed and "the server is stopping" in failed[0]["error"], served.stderr()
        assert exited_s < limit_s + 2.5, served.stderr()
    assert _stored_paths(db, "di") == {f"sessions/s1/{i}" for i in range(turns)}
    assert _vectors(db, "di") < turns  # the ones not sent heal in the background


def _hold_user_lock(db: Database, user: str) -> Any:
    """Hold the lock that serialises writers of ``user``'s rows (``RowsRepository.lock``),
    as a long write of that user on another replica would; returns the connection."""
    conn = db.engine.connect()
    conn.execute(
        text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"),
        {"k": f"memstrata.embeddings:{user}"},
    )
    conn.commit()
    return conn


def test_work_outlasting_the_limit_is_abandoned_without_delaying_the_exit(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    """The import has its vectors but waits for the user's write lock, which another
    connection holds past the limit. serve logs it as abandoned, closes the runtime and
    exits without waiting for the thread; the half-done transaction stores nothing."""
    fake.delay_s = 0.01
    turns, limit_s = 2, 3
    lock = _hold_user_lock(db, "el")
    try:
        with serving(tmp_path, pg_url, fake, grace_s=1, **LIMIT_SETTINGS) as served:
            waited, exited_s = _cut_off_then_stopped(served, fake, "el", turns)
            assert waited["finished"] == [], served.stderr()
            assert waited["abandoned"] == [{"method": "POST", "route": BATCH, "user_id": "el"}]
            assert waited["limit_s"] == limit_s
            assert limit_s - 0.5 < waited["waited_s"] < limit_s + 0.5
            # The 503 came at the end of the grace; the thread still waits for the lock.
            # Slack for closing the runtime on a loaded machine.
            assert exited_s < limit_s + 2.5, served.stderr()
    finally:
        lock.close()  # releases the session-level lock
    assert _stored_paths(db, "el") == set()

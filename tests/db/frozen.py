"""What the tests of a frozen database (SIGSTOP, ``Server.stopped()``) share."""

from __future__ import annotations

import threading
import time
from typing import Any

from fastapi.testclient import TestClient

from memstrata.runtime import Memstrata
from tests.api.test_frozen_database_outage import BOUND_S, SEARCH, Server
from tests.waiting import wait_for

# The longest a request refused while the monitor finds the database lost may take.
REFUSED_WITHIN_S = 1.0


def searches_refused_while_lost(
    server: Server,
    mem: Memstrata,
    client: TestClient,
    headers: dict[str, str],
    body: dict[str, Any],
    *,
    searches: int = 4,
) -> None:
    """Once the monitor finds the frozen server lost, ``searches`` searches on threads of
    their own all get 503 ``database_unavailable`` within ``REFUSED_WITHIN_S``; once the
    server runs again and the monitor finds it up, the same search answers 200."""
    answers: list[tuple[int, str, float]] = []

    def search() -> None:
        began = time.monotonic()
        response = client.post(SEARCH, headers=headers, json=body)
        answers.append((response.status_code, response.json().get("code"), began))

    with server.stopped():
        wait_for(lambda: mem.db.up() is False, BOUND_S, "the monitor to find the database lost")
        threads = [threading.Thread(target=search) for _ in range(searches)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        ended = time.monotonic()
    assert [a[:2] for a in answers] == [(503, "database_unavailable")] * searches
    waited = max(ended - a[2] for a in answers)
    assert waited < REFUSED_WITHIN_S, waited
    wait_for(lambda: mem.db.up() is True, 15, "the monitor to find the database up")
    assert client.post(SEARCH, headers=headers, json=body).status_code == 200

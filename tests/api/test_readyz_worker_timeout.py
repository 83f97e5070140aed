"""``/readyz`` when the re-embedding worker's timeout opened the circuit on a server that
answers the cheap request (``embedding_slow``): ``slow``, with the passage timeout to
raise, as for a search's or a write's timeout. Before, the worker's last try (at
``SLOW_STRETCH_MOST`` times the timeout) counted without the cheap request asked after it,
so the open circuit read ``unreachable`` until a request closed it.

The fake API of ``tests/retrieval/fault_server`` in its ``hang`` mode accepts every
embedding request and never answers it, while it answers the cheap ``GET …/models`` (any
status counts); real PostgreSQL, the app and its worker through the lifespan.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_readyz_embedding import TURN, app_on
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

# One text's timeout, and the worker's tries at 1x, 2x and 4x of it: ~1 s in all.
TIMEOUT_S = 0.1
PER_TEXT_S = 0.05


def readiness(client: TestClient) -> dict[str, Any]:
    body: dict[str, Any] = client.get("/readyz").json()
    return body


def test_a_circuit_the_worker_opened_on_a_timeout_reads_slow(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    with (
        FaultServer("ok") as fault,
        app_on(
            fault.as_api_of(settings),
            db,
            embedding_heal=True,
            embedding_heal_interval_s=0.05,
            embedding_timeout_s=TIMEOUT_S,
            embedding_timeout_per_text_s=PER_TEXT_S,
            embedding_breaker_cooldown_s=60,  # no probe of the open circuit within the test
        ) as client,
    ):
        mem: Memstrata = client.app.state.context.mem  # type: ignore[attr-defined]
        assert mem.healer is not None
        embedder = mem.healer.embedder
        fault.mode = "hang"
        # The write's timeout: one failure of two. The worker's last try: the second.
        turn = {"turn_index": 0, "user_message": "the kite is red"}
        written = client.post(TURN, headers=auth(), json=turn)
        assert written.json()["embedding_failed"] == 1, written.text
        end = time.monotonic() + 30
        while not embedder.circuit_open and time.monotonic() < end:
            time.sleep(0.05)
        assert embedder.circuit_open, "the worker's timeouts did not open the circuit"
        assert embedder.breaker.failures == 2
        # The cheap request is asked aside, after the timeout.
        wait_for(
            lambda: readiness(client)["embedding"] != "unreachable", 5, "no longer unreachable"
        )
        body = readiness(client)
    assert (body["status"], body["embedding"], body["vectors"]) == ("ready", "slow", "degraded")
    assert "MEMSTRATA_EMBEDDING_TIMEOUT_S" in str(body["embedding_check"]), body
    assert body["embedding_slow_s"] >= (TIMEOUT_S + PER_TEXT_S) * 4 - 0.05, body

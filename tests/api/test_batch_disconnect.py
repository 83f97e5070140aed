"""An inline batch whose client hangs up stops embedding, as if its budget had run out.

Every turn is still stored, in the one transaction (all or nothing); the embedding
requests not yet sent are not sent, those turns are stored without a vector, and the
background worker embeds them. Before, the write went on embedding for as long as its
budget allowed for a client that was gone. A real uvicorn server and a real client socket
that closes mid-batch; the slow embedding API is the fault-injection fake in its slow mode.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_batch_budget import _vectors
from tests.api.test_batch_turns import BATCH, _turn
from tests.loop_lag import serve_on_own_loop
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

TURNS = 48  # 6 requests of 8 texts
PER_TEXT_S = 0.1  # 0.8 s a request: 4.8 s for the batch, all inline
BUDGET_S = 60.0  # far beyond the batch: only the hang-up may stop it
TOPIC = "lighthouse keeper"


@pytest.fixture
def slow_api() -> Iterator[FaultServer]:
    with FaultServer("ok") as fake:
        yield fake


def _post_then_hang_up(url: str, headers: dict[str, str], body: bytes, slow: FaultServer) -> None:
    """POST ``body``, then close the connection once the first embedding request is in."""
    place = urlsplit(url)
    head = [f"POST {BATCH} HTTP/1.1", f"Host: {place.netloc}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append(f"Content-Length: {len(body)}")
    with socket.create_connection((place.hostname, place.port)) as conn:
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        wait_for(lambda: _batch_requests(slow), 30, "the batch's first embedding request")


def _batch_requests(slow: FaultServer) -> int:
    """The embedding requests of the batch's turns (not the start-up probe's)."""
    return sum(any(TOPIC in text for text in r.body["input"]) for r in slow.requests)


def test_a_batch_whose_client_hangs_up_leaves_the_rest_to_the_worker(
    settings: Settings,
    db: Database,
    auth: AuthHeader,
    slow_api: FaultServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = EmbeddingModelSpec(name="fake-model", base_url=slow_api.base_url)
    tuned = settings.model_copy(
        update={
            "embedding_models": [spec],
            "embedding_file_budget_s": BUDGET_S,
            "embedding_max_retries": 0,
            "embedding_heal_interval_s": 60.0,  # only a wake brings the vectors in time
        }
    )
    caplog.set_level(logging.INFO, logger="memstrata.retrieval.indexer")
    mem = Memstrata.open(tuned, database=db)
    try:
        with serve_on_own_loop(create_app(memstrata=mem)) as server:
            slow_api.mode, slow_api.delay_s = "slow", PER_TEXT_S
            turns = [_turn("s1", i, f"turn {i} about the {TOPIC}") for i in range(TURNS)]
            body = json.dumps({"turns": turns}).encode()
            _post_then_hang_up(server.url, auth("alice"), body, slow_api)

            def written() -> list[dict[str, object]]:
                return [
                    event_fields(r)
                    for r in caplog.records
                    if event_fields(r).get("event") == "index.rounds.deferred"
                ]

            wait_for(lambda: len(_vectors(db)) == TURNS, 30, lambda: f"rows: {_vectors(db)}")
            wait_for(written, 10, "the write's deferred rows")
            [event] = written()
            # The request in flight when the client left ends as it would; no later one
            # is sent (all six inline would embed all 48).
            assert event["user_id"] == "alice" and event["write"] == "batch"
            assert isinstance(event["embedded"], int) and 8 <= event["embedded"] <= 16, event
            assert event["deferred"] == TURNS - event["embedded"]
            slow_api.delay_s = 0.0  # the worker's turn: quick, to keep the test short
            wait_for(lambda: all(_vectors(db)), 30, lambda: f"vectors: {_vectors(db)}")
    finally:
        mem.close()

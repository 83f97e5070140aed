"""A write of turns whose client hangs up while its request waits for a slot in the passage
lane leaves the queue unsent: its rows are stored without a vector and the worker embeds
them. Before, the single-turn route did not watch its client at all, and a batch's queued
request, once the slot came, was sent for nobody. With no budget (nothing else would embed
the rows) the write still embeds them, client or not.

A real uvicorn server and a real client socket that closes while the write is queued behind
another user's slow request; the slow embedding API is the fault-injection fake.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_batch_turns import BATCH, _turn
from tests.loop_lag import serve_on_own_loop
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

TURN = "/api/memory/conversations/s1/turns"
BOB_TURNS = 8  # one request of 8 texts, in flight while alice's write waits its turn
PER_TEXT_S = 0.5  # 4 s for bob's request: far longer than the hang-up takes to end the wait
ALICE = "alice's lighthouse keeper"
BOB = "bob's harbour pilot"


@pytest.fixture
def slow_api() -> Iterator[FaultServer]:
    with FaultServer("ok") as fake:
        yield fake


def post_then_hang_up(
    url: str, path: str, headers: dict[str, str], body: bytes, until: Callable[[], object]
) -> None:
    """POST ``body`` to ``path``, then close the connection once ``until()`` is true."""
    place = urlsplit(url)
    head = [f"POST {path} HTTP/1.1", f"Host: {place.netloc}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append(f"Content-Length: {len(body)}")
    with socket.create_connection((place.hostname, place.port)) as conn:
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        wait_for(until, 30, "the write queued for a slot")


def sent(api: FaultServer, topic: str) -> int:
    """Texts about ``topic`` the embedding API has been sent so far."""
    return sum(topic in t for r in api.requests for t in r.body.get("input", []))


def alice_vectors(db: Database) -> list[bool]:
    with db.engine.connect() as conn:
        found = conn.execute(
            text("SELECT embedding IS NOT NULL FROM memory_embeddings WHERE user_id = 'alice'")
        )
        return [bool(r[0]) for r in found]


def deferred_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        fields
        for r in caplog.records
        if (fields := event_fields(r)).get("event") == "index.rounds.deferred"
        and fields.get("user_id") == "alice"
    ]


class Queued:
    """A server whose passage lane is held by bob's slow request, and alice's write of
    turns that waits behind it when its client hangs up."""

    def __init__(self, mem: Memstrata, api: FaultServer, url: str, auth: AuthHeader) -> None:
        self.mem, self.api, self.url, self.auth = mem, api, url, auth
        embedder = mem.indexer.embedder
        assert isinstance(embedder, OpenAICompatibleEmbedder)
        self.lanes = embedder.lanes
        api.mode, api.delay_s = "slow", PER_TEXT_S
        rounds = [Round("b", i, f"turn {i}: {BOB}", "ok") for i in range(BOB_TURNS)]
        self.bob = threading.Thread(target=mem.import_rounds, args=("bob", rounds))
        self.bob.start()
        wait_for(lambda: sent(api, BOB), 30, "bob's request in flight")

    def hang_up(self, path: str, body: dict[str, object]) -> None:
        post_then_hang_up(
            self.url, path, self.auth("alice"), json.dumps(body).encode(), self.queued
        )

    def queued(self) -> bool:
        return self.lanes.waiting > 0

    def finish(self) -> None:
        self.api.delay_s = 0.0  # the worker's turn: quick, to keep the test short
        self.bob.join(30)


@pytest.fixture
def queued(
    settings: Settings,
    db: Database,
    auth: AuthHeader,
    slow_api: FaultServer,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> Iterator[Queued]:
    """``request.param``: settings for the runtime (the budget, the worker)."""
    spec = EmbeddingModelSpec(name="fake-model", base_url=slow_api.base_url)
    tuned = settings.model_copy(
        update={
            "embedding_models": [spec],
            "embedding_file_budget_s": 60.0,  # far beyond the wait: only a hang-up ends it
            "embedding_bulk_wait_s": 60.0,
            "embedding_max_retries": 0,
            "embedding_heal_interval_s": 60.0,  # only a wake brings the vectors in time
            **getattr(request, "param", {}),
        }
    )
    caplog.set_level(logging.INFO, logger="memstrata.retrieval.indexer")
    mem = Memstrata.open(tuned, database=db)
    try:
        with serve_on_own_loop(create_app(memstrata=mem)) as server:
            writes = Queued(mem, slow_api, server.url, auth)
            try:
                yield writes
            finally:
                writes.finish()
    finally:
        mem.close()


def test_a_turn_queued_for_a_slot_whose_client_hangs_up_is_left_to_the_worker(
    queued: Queued, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    queued.hang_up(TURN, {"turn_index": 0, "user_message": ALICE, "assistant_reply": "ok"})
    wait_for(lambda: deferred_events(caplog), 10, "alice's turn deferred")
    # Her wait ended while bob's request still ran, and her text was never sent by it.
    assert queued.bob.is_alive()
    assert sent(queued.api, ALICE) == 0
    [event] = deferred_events(caplog)
    assert event["write"] == "turn" and event["embedded"] == 0 and event["deferred"] == 1
    assert alice_vectors(db) == [False]  # stored at once, found by BM25
    assert queued.mem.indexer.file_budget.rounds_deferred["turn"] == 1
    queued.finish()  # the worker, woken, embeds it once bob's request is done
    wait_for(lambda: alice_vectors(db) == [True], 30, lambda: f"{alice_vectors(db)}")


def test_a_batch_queued_for_a_slot_whose_client_hangs_up_sends_nothing(
    queued: Queued, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    turns = [_turn("s1", i, f"turn {i}: {ALICE}") for i in range(16)]
    queued.hang_up(BATCH, {"turns": turns})
    wait_for(lambda: deferred_events(caplog), 10, "alice's batch deferred")
    assert queued.bob.is_alive()
    assert sent(queued.api, ALICE) == 0  # not the first request, once the slot came free
    [event] = deferred_events(caplog)
    assert event["write"] == "batch" and event["embedded"] == 0 and event["deferred"] == 16
    assert alice_vectors(db) == [False] * 16
    queued.finish()
    wait_for(lambda: all(alice_vectors(db)), 30, lambda: f"{alice_vectors(db)}")


@pytest.mark.parametrize(
    "queued",
    [{"embedding_file_budget_s": 0.0}, {"embedding_heal": False}],
    ids=["no budget", "no worker"],
    indirect=True,
)
@pytest.mark.parametrize("path", [TURN, BATCH])
def test_without_a_budget_a_write_whose_client_hangs_up_embeds_every_turn(
    queued: Queued, db: Database, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """Nothing else would embed them (no worker runs, or a write is not to leave any to
    it): the write waits its turn and embeds them as if the client were there."""
    one = {"turn_index": 0, "user_message": ALICE, "assistant_reply": "ok"}
    queued.hang_up(path, one if path == TURN else {"turns": [_turn("s1", 0, ALICE)]})
    wait_for(lambda: alice_vectors(db) == [True], 30, lambda: f"{alice_vectors(db)}")
    assert sent(queued.api, ALICE) == 1
    assert not deferred_events(caplog)

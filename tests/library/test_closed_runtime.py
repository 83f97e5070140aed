"""A closed runtime with an embedding API: search and the agent pool refuse with
``RuntimeClosedError`` like every other call, before the query is embedded.

tests/test_library_inputs.py covers every entry point on a BM25-only runtime, whose search
reached the index check (which refuses) with nothing to embed first. With an embedding API
the query was embedded first, on the client ``close()`` had closed: httpx's ``RuntimeError:
Cannot send a request, as the client has been closed``, and the agent's ``memory_search``
answered "memory search failed; try again", which can never work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from memstrata.errors import RuntimeClosedError
from memstrata.retrieval.embeddings import EmbeddingKind, OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import CLOSED_MESSAGE, Memstrata

USER = "closed-user"


class CountingEmbedder(OpenAICompatibleEmbedder):
    """The real client, counting the query embeddings it is asked for."""

    queries = 0

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        if kind == "query":
            self.queries += 1
        return super().embed(texts, kind)


def test_search_on_a_closed_runtime_is_refused_before_the_query_is_embedded(
    open_runtime: Callable[..., Memstrata], embedding_server: LocalEmbeddingServer
) -> None:
    embedder = CountingEmbedder(embedding_server.model_spec)
    mem = open_runtime(embedder)
    mem.store.upsert_memory_file(USER, "memory", "# MEMORY.md\n- Likes green tea\n")
    assert mem.search.search(USER, "green tea", top_k=3).mode == "hybrid"
    session = asyncio.run(mem.open_agent_session(USER, token_limit=8000))
    asked = embedder.queries
    mem.close()

    with pytest.raises(RuntimeClosedError, match="this Memstrata was closed"):
        mem.search.search(USER, "which drink do I like?", top_k=3)
    answer = asyncio.run(session.tools.call("memory_search", {"query": "what did I drink?"}))
    assert answer == "error: " + CLOSED_MESSAGE, answer
    assert embedder.queries == asked  # refused before the query was embedded
    session.close()


def test_the_agent_pool_of_a_closed_runtime_is_refused(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """The README's "every call raises": a pool whose listener is stopped hears no more
    invalidations, so a cached agent it handed out could be stale for good."""
    mem = open_runtime()
    assert mem.pool.get(USER, lambda: "agent") == "agent"
    mem.close()
    with pytest.raises(RuntimeClosedError, match="this Memstrata was closed"):
        mem.pool.get(USER, lambda: "agent")
    with pytest.raises(RuntimeClosedError):
        mem.pool.peek(USER)

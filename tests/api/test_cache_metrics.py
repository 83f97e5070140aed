"""``/metrics`` shows this process's search cache: bytes, budget, users, hits, misses, evictions."""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi.testclient import TestClient

from memstrata.config import Settings

AuthHeader = Callable[..., dict[str, str]]


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

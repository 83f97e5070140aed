"""Turn validation over HTTP, the same on the single-turn and the batch route: timestamps
before the epoch, session ids, text and user ids UTF-8 cannot encode, re-posting a turn
without a timestamp, and the batch's 422 listing every invalid turn."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import text
from sqlalchemy.exc import DataError

from memstrata.api.errors import map_exception
from memstrata.db.database import Database
from memstrata.retrieval.session_ids import SESSION_ID_HINT
from tests.api.auth import AuthHeader, bearer
from tests.api.conftest import TokenFactory

TURN = "/api/memory/conversations/{}/turns"
BATCH = "/api/memory/conversations/turns:batch"
SEARCH = "/api/memory/search"
WHEN = "2026-06-01T12:00:00Z"
EPOCH_RULE = "timestamp must be on or after 1970-01-01T00:00:00Z"


def post(client: TestClient, url: str, headers: dict[str, str], body: Any) -> Response:
    """POST ``body`` as ASCII JSON (``\\ud800`` escapes survive, as any client may send)."""
    return client.post(
        url,
        headers={**headers, "Content-Type": "application/json"},
        content=json.dumps(body).encode("ascii"),
    )


def turn(session: str, index: int, user: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"session_id": session, "turn_index": index, "user_message": user, **extra}


def rows(db: Database, user: str = "alice") -> list[tuple[str, int, datetime]]:
    with db.engine.connect() as conn:
        return [
            (r[0], r[1], r[2])
            for r in conn.execute(
                text(
                    "SELECT file_path, id, created_at FROM memory_embeddings "
                    "WHERE user_id = :u ORDER BY file_path, chunk_index"
                ),
                {"u": user},
            )
        ]


# -- 1. timestamps before the epoch -------------------------------------------------------

OLD = ["0001-01-01T00:00:00+01:00", "0001-01-01T00:30:00+01:00", "1969-12-31T23:59:59Z"]


@pytest.mark.parametrize("when", OLD)
def test_a_timestamp_before_the_epoch_is_422_on_both_routes(
    client: TestClient, auth: AuthHeader, db: Database, when: str
) -> None:
    single = post(
        client,
        TURN.format("s1"),
        auth(),
        {"turn_index": 0, "user_message": "hi", "timestamp": when},
    )
    assert single.status_code == 422, single.text
    assert single.json()["code"] == "validation_error"
    assert EPOCH_RULE in single.json()["detail"]
    batch = post(client, BATCH, auth(), {"turns": [turn("s1", 0, timestamp=when)]})
    assert batch.status_code == 422, batch.text
    (error,) = batch.json()["errors"]
    assert (error["index"], error["session_id"], error["turn_index"]) == (0, "s1", 0)
    assert EPOCH_RULE in error["error"]
    assert rows(db) == []
    # nothing poisoned: the user's searches still answer
    assert post(client, SEARCH, auth(), {"query": "hi"}).status_code == 200


def test_the_epoch_itself_is_accepted(client: TestClient, auth: AuthHeader) -> None:
    body = {"turn_index": 0, "user_message": "hi", "timestamp": "1970-01-01T00:00:00Z"}
    assert post(client, TURN.format("s1"), auth(), body).status_code == 200
    hits = post(client, SEARCH, auth(), {"query": "hi"}).json()["hits"]
    assert hits[0]["created_at"].startswith("1970-01-01T00:00:00")


def test_a_data_error_names_integers_only_when_the_database_says_so() -> None:
    overflow = DataError(
        "INSERT", {}, psycopg.errors.NumericValueOutOfRange("integer out of range")
    )
    mapped = map_exception(overflow)
    assert mapped is not None and mapped.status_code == 400
    assert "integers must be below 2^31" in mapped.body["detail"]
    for orig in (
        psycopg.DataError("timestamp too small (before year 1)"),  # the driver, reading
        psycopg.errors.DatetimeFieldOverflow("date/time field value out of range"),
    ):
        mapped = map_exception(DataError("SELECT", {}, orig))
        assert mapped is not None
        assert (mapped.status_code, mapped.body["code"]) == (400, "value_out_of_range")
        assert "integer" not in mapped.body["detail"]
        assert "2^31" not in mapped.body["detail"]


# -- 2. re-posting a turn without a timestamp ---------------------------------------------


def _age(db: Database, days: int) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE memory_embeddings SET created_at = created_at - make_interval(days => :d)"
            ),
            {"d": days},
        )


def test_reposting_the_same_turn_without_a_timestamp_changes_nothing(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    body = {"turn_index": 0, "user_message": "identical pancakes text"}
    assert post(client, TURN.format("s1"), auth(), body).status_code == 200
    _age(db, 3)  # as if posted three days ago
    before = rows(db)
    again = post(client, TURN.format("s1"), auth(), body).json()
    assert (again["inserted"], again["deleted"], again["unchanged"]) == (0, 0, 1)
    assert rows(db) == before
    batch = post(client, BATCH, auth(), {"turns": [turn("s1", 0, "identical pancakes text")]})
    assert (batch.json()["inserted"], batch.json()["unchanged"]) == (0, 1)
    assert rows(db) == before
    hit = post(client, SEARCH, auth(), {"query": "pancakes"}).json()["hits"][0]
    assert datetime.fromisoformat(hit["created_at"]) == before[0][2]


def test_reposting_new_text_without_a_timestamp_replaces_it_now(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    assert post(client, TURN.format("s1"), auth(), {"turn_index": 0, "user_message": "a"})
    _age(db, 3)
    again = post(client, TURN.format("s1"), auth(), {"turn_index": 0, "user_message": "b"})
    assert (again.json()["inserted"], again.json()["deleted"]) == (1, 1)
    ((_, _, created_at),) = rows(db)
    assert abs(datetime.now(UTC) - created_at) < timedelta(minutes=1)


# -- 3. one session-id rule ---------------------------------------------------------------

BAD_IDS = ["a/b", "x\ny", "..\\..", "   ", "", "s" * 201, "a\x85b", "a\x9fb", "a\ud800b"]


def test_the_batch_route_refuses_what_the_single_route_refuses(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    turns = [turn(sid, 0, timestamp=WHEN) for sid in BAD_IDS] + [turn("fine", 0)]
    response = post(client, BATCH, auth(), {"turns": turns})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "validation_error"
    assert body["detail"].startswith(f"{len(BAD_IDS)} of {len(BAD_IDS) + 1} turns are invalid")
    assert [e["index"] for e in body["errors"]] == list(range(len(BAD_IDS)))
    for sid, error in zip(BAD_IDS, body["errors"], strict=True):
        assert set(error) == {"index", "session_id", "turn_index", "error", "field"}
        assert error["field"] == "session_id"
        assert error["session_id"] == sid
        assert error["turn_index"] == 0
        assert error["error"].startswith(("invalid session_id", "session_id is empty")), error
        assert error["error"].endswith(f"; {SESSION_ID_HINT}"), error
    assert rows(db) == []


@pytest.mark.parametrize("session_id", ["%20%20%20", "%20", "a%C2%85b", "a%C2%9Fb", "a%E2%80%A8b"])
def test_more_bad_session_ids_are_400_on_the_single_route(
    client: TestClient, auth: AuthHeader, db: Database, session_id: str
) -> None:
    response = post(client, TURN.format(session_id), auth(), {"turn_index": 0, "user_message": "x"})
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_session_id"
    assert response.json()["detail"].endswith(f"; {SESSION_ID_HINT}")
    assert rows(db) == []


@pytest.mark.parametrize("session_id", ["会话一", "a b", "chat-2026.12.03"])
def test_good_session_ids_in_a_batch(client: TestClient, auth: AuthHeader, session_id: str) -> None:
    response = post(client, BATCH, auth(), {"turns": [turn(session_id, 0)]})
    assert response.status_code == 200, response.text


# -- 4. lone surrogates -------------------------------------------------------------------


@pytest.mark.parametrize("field", ["user_message", "assistant_reply"])
def test_a_lone_surrogate_in_the_text_is_422(
    client: TestClient, auth: AuthHeader, db: Database, field: str
) -> None:
    single = post(client, TURN.format("s1"), auth(), {"turn_index": 0, field: "x \ud800 y"})
    assert single.status_code == 422, single.text
    assert single.json()["code"] == "validation_error"
    assert f"{field} is not valid Unicode" in single.json()["detail"]
    batch = post(client, BATCH, auth(), {"turns": [turn("s1", 0, **{field: "\udfff"})]})
    assert batch.status_code == 422, batch.text
    assert f"{field} is not valid Unicode" in batch.json()["errors"][0]["error"]
    assert rows(db) == []


def test_a_token_whose_sub_utf8_cannot_encode_is_401(
    client: TestClient, make_token: TokenFactory
) -> None:
    token = make_token("\ud800abc")
    response = client.get("/api/config/limits", headers=bearer(token))
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthorized"
    assert "not valid Unicode" in response.json()["detail"]
    assert "WWW-Authenticate" in response.headers


# -- 5. the batch's 422 lists every invalid turn, schema errors included ------------------


def test_schema_errors_come_back_per_turn_in_the_batch_shape(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    turns: list[Any] = [
        turn("s1", 0, timestamp=WHEN),  # fine
        turn("s1", -1),  # schema: turn_index
        turn("s1", 2, timestamp="yesterday"),  # schema: timestamp
        turn("s1", 3, extra="no"),  # schema: unknown field
        turn("s1", 4, user_message=""),  # rounds: empty
        5,  # not an object
        {"turn_index": 6},  # no session_id
        turn("s1", 0),  # duplicate of the first
        turn("s1", 7, timestamp=WHEN),  # fine
    ]
    response = post(client, BATCH, auth(), {"turns": turns})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "validation_error"
    assert body["detail"].startswith("7 of 9 turns are invalid, nothing was stored")
    errors = body["errors"]
    assert [(e["index"], e["session_id"], e["turn_index"]) for e in errors] == [
        (1, "s1", -1),
        (2, "s1", 2),
        (3, "s1", 3),
        (4, "s1", 4),
        (5, None, None),
        (6, None, 6),
        (7, "s1", 0),
    ]
    assert errors[0]["error"] == "turn_index must be a JSON integer from 0 to 2147483647; got -1"
    assert errors[1]["error"].startswith("timestamp: Input should be an ISO 8601 date-time")
    assert errors[2]["error"] == (
        "unknown field extra; a turn takes turn_index, user_message, assistant_reply, "
        "timestamp, session_id"
    )
    assert errors[3]["error"] == (
        "a round needs user_message or assistant_reply (or both); both are empty or blank"
    )
    assert errors[4]["error"] == "turn: each turn must be a JSON object, not a number"
    assert errors[5]["error"] == "missing required field: session_id"
    assert "appears twice" in errors[6]["error"]
    assert rows(db) == []


def test_a_batch_with_one_schema_error_has_its_message_as_detail(
    client: TestClient, auth: AuthHeader
) -> None:
    response = post(client, BATCH, auth(), {"turns": [turn("s1", -1)]})
    assert response.status_code == 422
    said = "turn_index must be a JSON integer from 0 to 2147483647; got -1"
    assert response.json()["detail"] == said
    assert response.json()["errors"] == [
        {"index": 0, "session_id": "s1", "turn_index": -1, "error": said, "field": "turn_index"}
    ]

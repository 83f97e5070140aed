"""A turn over the size limit over REST: the single-turn route's 422 names the field, the
batch's 422 lists the turn and stores nothing. A 422 like every other rule of a turn (a
batch lists each invalid turn in it; 413 is the whole body's), well under the body limit."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES
from tests.api.auth import AuthHeader

TURN = "/api/memory/conversations/{}/turns"
BATCH = "/api/memory/conversations/turns:batch"
OVER = "é" * (MAX_TURN_BYTES // 2) + "!"  # 262,145 bytes in 131,073 characters
RULE = (
    f"over the limit of {MAX_TURN_BYTES} bytes (UTF-8) for one turn's user_message and "
    "assistant_reply; split the text over several turns, each part with the next turn_index"
)


def row_count(db: Database, user: str = "alice") -> int:
    with db.engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(*) FROM memory_embeddings WHERE user_id = :u"), {"u": user}
        ).scalar_one()
    return int(count)


def test_one_turn_over_the_limit_is_a_422_naming_the_field(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    response = client.post(
        TURN.format("s1"), headers=auth(), json={"turn_index": 0, "user_message": OVER}
    )
    assert response.status_code == 422, response.text
    body = response.json()
    said = f"user_message is {MAX_TURN_BYTES + 1} bytes, {RULE}"
    assert (body["code"], body["detail"]) == ("validation_error", said)
    assert body["errors"] == [{"loc": ["body", "user_message"], "msg": said, "type": "value_error"}]
    assert row_count(db) == 0


def test_both_texts_over_the_limit_together_name_no_one_field(
    client: TestClient, auth: AuthHeader
) -> None:
    half = "x" * (MAX_TURN_BYTES // 2 + 1)
    turn = {"turn_index": 0, "user_message": half, "assistant_reply": half}
    response = client.post(TURN.format("s1"), headers=auth(), json=turn)
    assert response.status_code == 422, response.text
    said = f"user_message and assistant_reply are {MAX_TURN_BYTES + 2} bytes together, {RULE}"
    assert response.json()["errors"] == [{"loc": ["body"], "msg": said, "type": "value_error"}]


def test_a_turn_at_the_limit_is_indexed(client: TestClient, auth: AuthHeader) -> None:
    turn = {"turn_index": 0, "user_message": "word " * (MAX_TURN_BYTES // 5)}
    response = client.post(TURN.format("s1"), headers=auth(), json=turn)
    assert response.status_code == 200, response.text
    assert response.json()["inserted"] > 1


def test_a_batch_with_a_turn_over_the_limit_stores_nothing(
    client: TestClient, auth: AuthHeader, db: Database
) -> None:
    turns = [
        {"session_id": "s1", "turn_index": 0, "user_message": "hello"},
        {"session_id": "s1", "turn_index": 1, "assistant_reply": OVER},
        {"session_id": "s2", "turn_index": 0, "user_message": "bye"},
    ]
    response = client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 422, response.text
    body = response.json()
    said = f"assistant_reply is {MAX_TURN_BYTES + 1} bytes, {RULE}"
    assert body["detail"] == f"1 of 3 turns are invalid, nothing was stored; first: {said}"
    assert body["errors"] == [
        {"index": 1, "session_id": "s1", "turn_index": 1, "error": said, "field": "assistant_reply"}
    ]
    assert row_count(db) == 0

"""A refusal names the input at fault where a 422 lists several or the route has its own
names for its texts: each invalid turn of a batch carries ``field`` beside its ``error``,
and the page's merge route names ``base``, ``mine`` or ``theirs``, not a file's
``content`` (the real app over the real database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.api.auth import AuthHeader

BATCH = "/api/memory/conversations/turns:batch"
MERGE = "/web/merge"
FILE_LIMIT = 256 * 1024  # the store's default max_content_bytes


def _turn(index: int, **fields: Any) -> dict[str, Any]:
    return {"session_id": "s1", "turn_index": index, "user_message": "hi", **fields}


def test_each_invalid_turn_of_a_batch_names_its_field(client: TestClient, auth: AuthHeader) -> None:
    future = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    turns: list[Any] = [
        _turn(0),
        _turn(1, user_message=""),  # no text on either side: no one field
        _turn(2, timestamp=future),
        _turn(3, assistant_reply="a\x00"),
        _turn(-1),  # the schema's refusal
        _turn(5, session_id="a/b"),
        _turn(6, mood="fine"),  # an unknown field is the one at fault
        42,  # not a turn at all
        _turn(0),  # the first turn again
        {"turn_index": 9, "user_message": 3},  # two fields at fault: none named
    ]
    response = client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [(e["index"], e["field"]) for e in errors] == [
        (1, None),
        (2, "timestamp"),
        (3, "assistant_reply"),
        (4, "turn_index"),
        (5, "session_id"),
        (6, "mood"),
        (7, None),
        (8, None),
        (9, None),
    ]
    # the field is added: the keys and their meaning are kept
    assert errors[1] == {
        "index": 2,
        "session_id": "s1",
        "turn_index": 2,
        "error": errors[1]["error"],
        "field": "timestamp",
    }
    assert errors[1]["error"].startswith("timestamp ")


def test_a_one_turn_batch_names_its_field(client: TestClient, auth: AuthHeader) -> None:
    response = client.post(BATCH, headers=auth(), json={"turns": [_turn(0, user_message=3)]})
    assert response.status_code == 422, response.text
    assert response.json()["errors"] == [
        {
            "index": 0,
            "session_id": "s1",
            "turn_index": 0,
            "error": "user_message must be a JSON string; got 3",
            "field": "user_message",
        }
    ]


def test_the_batch_error_entry_documents_its_field(app: FastAPI) -> None:
    entry = app.openapi()["components"]["schemas"]["BatchTurnError"]
    assert set(entry["properties"]) == {"index", "session_id", "turn_index", "error", "field"}
    assert "field" in entry["required"]  # always sent, null when no one field is at fault
    assert {"type": "null"} in entry["properties"]["field"]["anyOf"]


GOOD = {"base": "a\n", "mine": "b\n", "theirs": "a\n"}


@pytest.mark.parametrize("name", ["base", "mine", "theirs"])
def test_a_merge_text_with_a_nul_is_named_by_its_field(
    client: TestClient, auth: AuthHeader, name: str
) -> None:
    response = client.post(MERGE, headers=auth(), json={**GOOD, name: "x\x00"})
    assert response.status_code == 422, response.text
    said = f"{name} must not contain NUL characters ('\\x00' at character 2)"
    assert response.json()["detail"] == said
    assert response.json()["errors"] == [
        {"loc": ["body", name], "msg": said, "type": "value_error"}
    ]


def test_a_merge_text_with_a_lone_surrogate_is_named_by_its_field(
    client: TestClient, auth: AuthHeader
) -> None:
    body = '{"base": "a", "mine": "b\\ud800", "theirs": "a"}'
    response = client.post(
        MERGE, headers={**auth(), "Content-Type": "application/json"}, content=body
    )
    assert response.status_code == 422, response.text
    (item,) = response.json()["errors"]
    assert item["loc"] == ["body", "mine"]
    assert item["msg"].startswith("mine is not valid Unicode")


def test_a_merge_text_over_the_file_limit_is_named_by_its_field(
    client: TestClient, auth: AuthHeader
) -> None:
    response = client.post(MERGE, headers=auth(), json={**GOOD, "theirs": "x" * (FILE_LIMIT + 1)})
    assert response.status_code == 413, response.text
    assert response.json()["detail"] == (
        f"theirs is {FILE_LIMIT + 1} bytes, over the limit of {FILE_LIMIT} bytes (shorten the "
        "file; an operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
    )

"""``.`` and ``..`` are refused as session ids: sent as ``%2E%2E`` in the single-turn
route's path, ``..`` was stored as ``file_path`` ``sessions/../0`` — a path segment that
anything resolving the path (a URL, a directory) reads as the parent."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import InvalidContentError
from memstrata.retrieval.session_ids import SESSION_ID_HINT, SESSION_ID_RULE, check_session_id
from tests.api.auth import AuthHeader

TURN = "/api/memory/conversations/{}/turns"
BATCH = "/api/memory/conversations/turns:batch"
BODY = {"turn_index": 0, "user_message": "hi"}


def _said(session_id: str) -> str:
    return (
        f"invalid session_id {session_id!r}: '.' and '..' are path segments (the current "
        f"and the parent directory), not names; {SESSION_ID_HINT}"
    )


def _file_paths(db: Database) -> list[str]:
    with db.engine.connect() as conn:
        return list(conn.execute(text("SELECT file_path FROM memory_embeddings")).scalars())


@pytest.mark.parametrize(("in_path", "session_id"), [("%2E%2E", ".."), ("%2E", ".")])
def test_a_dot_session_id_in_the_path_is_400(
    client: TestClient, auth: AuthHeader, db: Database, in_path: str, session_id: str
) -> None:
    response = client.post(TURN.format(in_path), headers=auth(), json=BODY)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_session_id"
    assert response.json()["detail"] == _said(session_id)
    assert _file_paths(db) == []


@pytest.mark.parametrize("session_id", ["..", "."])
def test_a_dot_session_id_in_a_batch_is_a_per_turn_422(
    client: TestClient, auth: AuthHeader, db: Database, session_id: str
) -> None:
    turns = [{"session_id": "fine", **BODY}, {"session_id": session_id, **BODY}]
    response = client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert (error["index"], error["session_id"], error["field"]) == (1, session_id, "session_id")
    assert error["error"] == _said(session_id)
    assert _file_paths(db) == []


@pytest.mark.parametrize("session_id", ["...", ".hidden", "a..b", "..x", ". ."])
def test_other_ids_with_dots_are_still_names(session_id: str) -> None:
    assert check_session_id(session_id) == session_id


def test_the_rule_says_so() -> None:
    assert "not '.' or '..'" in SESSION_ID_RULE
    with pytest.raises(InvalidContentError):
        check_session_id("..")

"""What HTTP says of a refused session id: the library's reason and its short rule, on the
single-turn route's path and in the batch's per-turn errors alike. It was one 550-character
text ending in advice on URL decoders, even for an id sent in a JSON body."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from memstrata.retrieval.session_ids import SESSION_ID_HINT
from tests.api.auth import AuthHeader

TURN = "/api/memory/conversations/{}/turns"
BATCH = "/api/memory/conversations/turns:batch"
BODY = {"turn_index": 0, "user_message": "hi"}


@pytest.mark.parametrize(
    ("in_path", "said"),
    [
        ("a%5Cb", "invalid session_id 'a\\\\b': character 2 is '\\' (a path separator)"),
        ("%20%20", "invalid session_id '  ': it is blank"),
        (
            "caf%E9",
            "invalid session_id 'caf\ufffd': character 4 is U+FFFD REPLACEMENT CHARACTER (it "
            "stands where text was not valid UTF-8; send the id's own characters)",
        ),
    ],
)
def test_a_session_id_in_the_path(
    client: TestClient, auth: AuthHeader, in_path: str, said: str
) -> None:
    response = client.post(TURN.format(in_path), headers=auth(), json=BODY)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_session_id"
    assert response.json()["detail"] == f"{said}; {SESSION_ID_HINT}"


@pytest.mark.parametrize(
    ("session_id", "said"),
    [
        ("a/b", "invalid session_id 'a/b': character 2 is '/' (a path separator)"),
        ("", "session_id is empty"),
    ],
)
def test_a_session_id_in_a_batch(
    client: TestClient, auth: AuthHeader, session_id: str, said: str
) -> None:
    response = client.post(
        BATCH, headers=auth(), json={"turns": [{"session_id": session_id, **BODY}]}
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["error"] == f"{said}; {SESSION_ID_HINT}"
    assert "URL" not in response.text and "percent" not in response.text

"""A service's refusal over HTTP names its field: each 422 item's ``loc`` is the field the
raising check names (``InvalidContentError.field``), never guessed from the message's
first word; a refusal about no one field is the whole body's. A NUL in a search query is
refused as everywhere else; a body over the request limit and content over the file
limit are two 413s, each saying how to fix it; a token's user id with a NUL has the shared
wording.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstrata.retrieval.limits import MAX_QUERY_CHARS
from tests.api.auth import AuthHeader, bearer
from tests.api.conftest import TokenFactory

SEARCH = "/api/memory/search"
TURN = "/api/memory/conversations/s1/turns"
FILE = "/api/config/agent-files/user"
NUL_QUERY = "query must not contain NUL characters ('\\x00' at character 4)"


@pytest.mark.parametrize(
    ("path", "body", "loc", "msg"),
    [
        (SEARCH, {"query": "  "}, "query", "query is blank: send the words to search for"),
        (
            SEARCH,
            {"query": "x" * (MAX_QUERY_CHARS + 1)},
            "query",
            f"query is {MAX_QUERY_CHARS + 1} characters; the limit is {MAX_QUERY_CHARS}",
        ),
        (SEARCH, {"query": "tea\x00"}, "query", NUL_QUERY),
        (SEARCH, {"query": "tea", "top_k": 0}, "top_k", "top_k must be an integer from 1 to 100"),
        (SEARCH, {"query": "tea", "as_of": "2999-01-01T00:00:00Z"}, "as_of", None),
        (
            TURN,
            {"turn_index": 0, "user_message": "a\x00"},
            "user_message",
            "user_message must not contain NUL characters ('\\x00' at character 2)",
        ),
        (
            TURN,
            {"turn_index": 0, "user_message": "hi", "timestamp": "1960-01-01T00:00:00Z"},
            "timestamp",
            None,
        ),
        (
            TURN,
            {"turn_index": 0},
            None,
            "a round needs user_message or assistant_reply (or both); both are empty or blank",
        ),
        (
            FILE,
            {"content": "ab\x00"},
            "content",
            "content must not contain NUL characters ('\\x00' at character 3)",
        ),
    ],
)
def test_a_service_refusal_names_its_field(
    client: TestClient,
    auth: AuthHeader,
    path: str,
    body: dict[str, Any],
    loc: str | None,
    msg: str | None,
) -> None:
    method = client.put if path == FILE else client.post
    response = method(path, headers=auth(), json=body)
    assert response.status_code == 422, response.text
    (item,) = response.json()["errors"]
    assert item["loc"] == (["body", loc] if loc else ["body"])
    assert item["type"] == "value_error"
    if msg is not None:
        assert item["msg"] == response.json()["detail"] == msg


def test_a_query_with_a_nul_is_refused_not_searched(client: TestClient, auth: AuthHeader) -> None:
    """A NUL cannot match stored text (which cannot hold one): it was searched for, and found
    nothing, without a word."""
    client.post(TURN, headers=auth(), json={"turn_index": 0, "user_message": "tea"})
    refused = client.post(SEARCH, headers=auth(), json={"query": "tea\x00"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == NUL_QUERY
    assert client.post(SEARCH, headers=auth(), json={"query": "tea"}).status_code == 200


def test_a_body_over_the_request_limit_says_how_to_send_less(
    client: TestClient, auth: AuthHeader
) -> None:
    limit = 1024 * 1024
    body = b'{"turns": [], "pad": "' + b"x" * limit + b'"}'
    response = client.post(
        "/api/memory/conversations/turns:batch",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert response.json()["detail"] == (
        f"request body is {len(body)} bytes, over the limit of {limit} bytes (send a "
        "smaller body, e.g. a batch's turns over several requests; an operator can raise "
        "MEMSTRATA_MAX_REQUEST_BYTES)"
    )


def test_content_over_the_file_limit_says_how_to_shorten_it(
    client: TestClient, auth: AuthHeader
) -> None:
    limit = 256 * 1024
    response = client.put(FILE, headers=auth(), json={"content": "x" * (limit + 1)})
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert response.json()["detail"] == (
        f"content is {limit + 1} bytes, over the limit of {limit} bytes (shorten the file; "
        "an operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
    )


def test_a_token_user_id_with_a_nul_has_the_shared_wording(
    client: TestClient, make_token: TokenFactory
) -> None:
    response = client.get("/api/config/limits", headers=bearer(make_token("bo\x00b")))
    assert response.status_code == 401, response.text
    said = "user_id must not contain NUL characters ('\\x00' at character 3)"
    assert said in response.json()["detail"]

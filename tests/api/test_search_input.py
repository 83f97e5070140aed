"""POST /api/memory/search: a bad query or top_k gets the search service's own message.

The bounds are checked once, by ``SearchService.search`` (as for the library and the CLI);
the request schema only documents them. ``""`` and ``"   "`` used to get two different
messages, a schema's and the service's.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from memstrata.retrieval.limits import MAX_QUERY_CHARS, MAX_TOP_K
from tests.api.auth import AuthHeader

SEARCH = "/api/memory/search"
BLANK = "query is blank: send the words to search for"
TOP_K = f"top_k must be an integer from 1 to {MAX_TOP_K}"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"query": ""}, BLANK),
        ({"query": "   "}, BLANK),
        (
            {"query": "x" * (MAX_QUERY_CHARS + 1)},
            f"query is {MAX_QUERY_CHARS + 1} characters; the limit is {MAX_QUERY_CHARS}",
        ),
        ({"query": "x", "top_k": 0}, TOP_K),
        ({"query": "x", "top_k": MAX_TOP_K + 1}, TOP_K),
    ],
)
def test_bad_query_or_top_k_gets_the_services_message(
    client: TestClient, auth: AuthHeader, body: dict[str, object], detail: str
) -> None:
    response = client.post(SEARCH, headers=auth(), json=body)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"
    assert response.json()["detail"] == detail


def test_the_bounds_are_accepted(client: TestClient, auth: AuthHeader) -> None:
    for body in ({"query": "x" * MAX_QUERY_CHARS, "top_k": 1}, {"query": "x", "top_k": MAX_TOP_K}):
        assert client.post(SEARCH, headers=auth(), json=body).status_code == 200


def test_the_schema_still_documents_the_bounds(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    properties = spec["components"]["schemas"]["SearchRequest"]["properties"]
    assert (properties["query"]["minLength"], properties["query"]["maxLength"]) == (
        1,
        MAX_QUERY_CHARS,
    )
    top_k = properties["top_k"]
    assert (top_k["minimum"], top_k["maximum"], top_k["default"]) == (1, MAX_TOP_K, 10)
    assert spec["components"]["schemas"]["SearchRequest"]["required"] == ["query"]


def test_a_query_of_the_wrong_type_is_still_the_schemas_refusal(
    client: TestClient, auth: AuthHeader
) -> None:
    response = client.post(SEARCH, headers=auth(), json={"query": 5, "top_k": "3"})
    assert response.status_code == 422
    assert {tuple(e["loc"]) for e in response.json()["errors"]} == {
        ("body", "query"),
        ("body", "top_k"),
    }


def test_a_lone_surrogate_in_the_query_is_422_with_the_services_words(
    client: TestClient, auth: AuthHeader
) -> None:
    """It was a 400 carrying the encoder's own words ("'utf-8' codec can't encode …")."""
    response = client.post(
        SEARCH,
        headers={**auth(), "Content-Type": "application/json"},
        content=b'{"query": "tea \\ud800"}',
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == (
        "query is not valid Unicode: it contains a lone surrogate ('\\ud800' at character 5)"
    )

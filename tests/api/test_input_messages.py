"""What a new user's first mistakes get back over HTTP: each refusal says what was wrong and
how to fix it (docs/API.md, "Errors"), and nothing wrong is taken silently.

- a future ``as_of`` is refused as a future turn ``timestamp`` is (it ranked every hit 0);
- a date that is not ISO 8601 is told the format, with an example;
- the turn route's body as docs/API.md's table gives it (which fields are optional);
- a 405 names the methods the path takes; a too long session id says its length;
- a batch turn that is not an object, and a concurrent write's 409, say what happened;
- a token whose user id has surrounding whitespace or a control character is refused.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstrata.api.errors import map_exception
from memstrata.errors import VersionConflictError
from memstrata.retrieval.rounds import MAX_FUTURE_SKEW
from tests.api.auth import AuthHeader, bearer
from tests.api.conftest import TokenFactory

SEARCH = "/api/memory/search"
TURN = "/api/memory/conversations/{}/turns"
BATCH = "/api/memory/conversations/turns:batch"
API_MD = Path(__file__).parents[2] / "docs" / "API.md"
ISO_HINT = (
    "Input should be an ISO 8601 date-time string, e.g. 2026-01-01T12:00:00Z, or leave it out"
)


# -- 1. a future as_of ---------------------------------------------------------------------


@pytest.mark.parametrize("as_of", ["2999-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00"])
def test_a_future_as_of_is_422_saying_the_limit(
    client: TestClient, auth: AuthHeader, as_of: str
) -> None:
    client.post(TURN.format("s1"), headers=auth(), json={"turn_index": 0, "user_message": "kite"})
    response = client.post(SEARCH, headers=auth(), json={"query": "kite", "as_of": as_of})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "validation_error"
    assert "as_of" in body["detail"] and "is in the future" in body["detail"]
    assert f"allowed skew {int(MAX_FUTURE_SKEW.total_seconds())} s" in body["detail"]


def test_an_as_of_within_the_skew_is_searched(client: TestClient, auth: AuthHeader) -> None:
    client.post(TURN.format("s1"), headers=auth(), json={"turn_index": 0, "user_message": "kite"})
    near = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
    response = client.post(SEARCH, headers=auth(), json={"query": "kite", "as_of": near})
    assert response.status_code == 200, response.text
    assert response.json()["hits"][0]["score"] > 0


def test_an_as_of_before_year_one_in_utc_is_not_called_future(
    client: TestClient, auth: AuthHeader
) -> None:
    # Year 1 east of UTC does not convert to UTC: it is early, not in the future.
    response = client.post(
        SEARCH, headers=auth(), json={"query": "kite", "as_of": "0001-01-01T00:00:00+05:00"}
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "as_of must be on or after 1970-01-01T00:00:00Z" in detail and "future" not in detail


# -- 2. dates that are not ISO 8601 ---------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "reason"),
    [
        ("yesterday", ""),  # pydantic's "(input is too short)" said nothing useful
        ("01/02/2026", ""),
        ("2026-13-01T00:00:00Z", " (month value is outside expected range of 1-12)"),
        ("2026-01-01 noon", " (unexpected extra characters at the end of the input)"),
    ],
)
def test_a_word_for_a_date_is_told_the_format_without_the_parsers_remark(
    client: TestClient, auth: AuthHeader, when: str, reason: str
) -> None:
    """The parser's reason is kept where the text is shaped as a date: it names the part
    at fault."""
    single = client.post(
        TURN.format("s1"),
        headers=auth(),
        json={"turn_index": 0, "user_message": "x", "timestamp": when},
    )
    assert single.status_code == 422, single.text
    assert single.json()["detail"] == f"invalid request: body.timestamp: {ISO_HINT}{reason}"


@pytest.mark.parametrize("when", ["tomorrow", "2026-13-01T00:00:00Z", "01/02/2026"])
def test_a_date_that_is_not_iso_8601_is_told_the_format(
    client: TestClient, auth: AuthHeader, when: str
) -> None:
    single = client.post(
        TURN.format("s1"),
        headers=auth(),
        json={"turn_index": 0, "user_message": "x", "timestamp": when},
    )
    assert single.status_code == 422, single.text
    assert single.json()["detail"].startswith(f"invalid request: body.timestamp: {ISO_HINT}")
    search = client.post(SEARCH, headers=auth(), json={"query": "x", "as_of": when})
    assert search.status_code == 422, search.text
    assert search.json()["detail"].startswith(f"invalid request: body.as_of: {ISO_HINT}")
    batch = client.post(
        BATCH,
        headers=auth(),
        json={
            "turns": [{"session_id": "s", "turn_index": 0, "user_message": "x", "timestamp": when}]
        },
    )
    assert batch.status_code == 422, batch.text
    assert batch.json()["errors"][0]["error"].startswith(f"timestamp: {ISO_HINT}")


# -- 3. docs/API.md's table marks optional fields as the schema has them ---------------------


def _doc_body_fields(route: str) -> tuple[set[str], set[str]]:
    """The (required, optional) fields of the first ``{…}`` body of ``route``'s row in
    docs/API.md's table; a field ending in ``?`` is optional."""
    row = next(line for line in API_MD.read_text(encoding="utf-8").splitlines() if route in line)
    body = re.search(r"`\{([^`]*?)\}", row)
    assert body is not None, row
    names = [f.strip() for f in body.group(1).split(",")]
    names = [n for n in names if re.fullmatch(r"\w+\??", n)]
    return {n for n in names if not n.endswith("?")}, {n[:-1] for n in names if n.endswith("?")}


@pytest.mark.parametrize(
    ("route", "schema"),
    [
        ("`/api/memory/search`", "SearchRequest"),
        ("`/api/memory/conversations/{session_id}/turns`", "TurnRequest"),
    ],
)
def test_the_table_marks_optional_what_the_schema_does_not_require(
    client: TestClient, route: str, schema: str
) -> None:
    spec = client.get("/openapi.json").json()["components"]["schemas"][schema]
    required, optional = _doc_body_fields(route)
    assert required == set(spec.get("required", [])), route
    assert required | optional == set(spec["properties"]), route


def test_a_turn_needs_one_of_its_messages_as_the_doc_says(
    client: TestClient, auth: AuthHeader
) -> None:
    for body in ({"turn_index": 1, "user_message": "x"}, {"turn_index": 2, "assistant_reply": "y"}):
        assert client.post(TURN.format("s1"), headers=auth(), json=body).status_code == 200
    neither = client.post(TURN.format("s1"), headers=auth(), json={"turn_index": 3})
    assert neither.status_code == 422
    assert "at least one of user_message and assistant_reply" in API_MD.read_text(encoding="utf-8")


# -- 5. messages that name the fix ----------------------------------------------------------


def test_a_405_names_the_methods_the_path_takes(client: TestClient, auth: AuthHeader) -> None:
    response = client.delete("/api/config/skills", headers=auth())
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
    assert response.json()["detail"] == "Method Not Allowed: this path takes GET"
    assert response.headers["allow"] == "GET"
    put_or_get = client.post("/api/config/agent-files/user", headers=auth(), json={})
    assert put_or_get.status_code == 405
    assert put_or_get.json()["detail"] == "Method Not Allowed: this path takes GET or PUT"
    assert put_or_get.headers["allow"] == "GET, PUT"  # Starlette's named the GET route's only


def test_a_too_long_session_id_says_its_length(client: TestClient, auth: AuthHeader) -> None:
    body = {"turn_index": 0, "user_message": "hi"}
    response = client.post(TURN.format("s" * 201), headers=auth(), json=body)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_session_id"
    assert "201 characters, over the limit of 200" in response.json()["detail"]
    batch = client.post(BATCH, headers=auth(), json={"turns": [{"session_id": "s" * 201, **body}]})
    assert "201 characters, over the limit of 200" in batch.json()["errors"][0]["error"]


@pytest.mark.parametrize(
    ("item", "kind"), [(5, "a number"), ("s1", "a string"), ([1], "an array"), (None, "null")]
)
def test_a_batch_turn_that_is_not_an_object_is_told_so(
    client: TestClient, auth: AuthHeader, item: Any, kind: str
) -> None:
    response = client.post(BATCH, headers=auth(), json={"turns": [item]})
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["error"] == f"turn: each turn must be a JSON object, not {kind}"
    assert "BatchTurn" not in response.text


def test_a_conflict_says_the_version_found() -> None:
    lost = VersionConflictError("u", "user_md", 3, 4)
    mapped = map_exception(lost)
    assert mapped is not None and mapped.status_code == 409
    detail = mapped.body["detail"]
    assert "expected version 3, found version 4" in detail
    assert "apply your change to version 4" in detail
    stale = str(VersionConflictError("u", "user_md", 1, 2))
    assert stale.startswith("version conflict on USER.md: expected version 1, found version 2")


# -- 6. user ids with surrounding whitespace or control characters --------------------------


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("bob\n", "whitespace"),
        (" bob", "whitespace"),
        ("bob\u3000", "whitespace"),
        ("b\tob", "U+0009"),
        ("b\x7fob", "U+007F"),
        ("b\x85ob", "U+0085"),
        ("b\u2028ob", "U+2028"),
        ("b\x1bob", "U+001B"),
    ],
)
def test_a_token_user_id_with_whitespace_or_controls_is_401(
    client: TestClient, make_token: TokenFactory, user: str, why: str
) -> None:
    response = client.get("/api/config/limits", headers=bearer(make_token(user)))
    assert response.status_code == 401, response.text
    assert why in response.json()["detail"]
    assert client.get("/api/config/limits", headers=bearer(make_token("b ob"))).status_code == 200

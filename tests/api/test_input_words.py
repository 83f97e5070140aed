"""A body that fails validation is told what is wrong in the reader's words, not pydantic's
("Extra inputs are not permitted", "Field required", "Input should be a valid dictionary or
object to extract fields from"): the field, what this body takes, what to send instead.
The 422's shape stays: ``detail`` and ``errors`` items with ``loc``, ``msg`` and ``type``,
pydantic's ``type`` kept, so a client that reads ``errors[].loc``/``type`` reads them still.
A service-level refusal (``InvalidContentError``) gets an item too, with the field's ``loc``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.auth import AuthHeader

FILE = "/api/config/agent-files/user"
SKILL = "/api/config/skills/web_search"
SEARCH = "/api/memory/search"
TURN = "/api/memory/conversations/s1/turns"
BATCH = "/api/memory/conversations/turns:batch"
JSON = {"Content-Type": "application/json"}
FILE_FIELDS = "this body takes content, expected_version"


def _refused(response: Any) -> tuple[str, list[dict[str, Any]]]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "validation_error" and body["message"] == body["detail"]
    return body["detail"], body["errors"]


CASES = [
    # (method, path, body, loc, type, msg): one mistake each
    (
        "PUT",
        FILE,
        {"content": "x", "expected_versoin": 1},
        ["body", "expected_versoin"],
        "extra_forbidden",
        f"unknown field expected_versoin; {FILE_FIELDS}",
    ),
    (
        "PUT",
        SKILL,
        {"enabled": False, "extra": 1},
        ["body", "extra"],
        "extra_forbidden",
        "unknown field extra; this body takes enabled",
    ),
    (
        "POST",
        SEARCH,
        {"query": "x", "topk": 3},
        ["body", "topk"],
        "extra_forbidden",
        "unknown field topk; this body takes query, top_k, sources, marks, as_of",
    ),
    ("PUT", FILE, {}, ["body", "content"], "missing", "missing required field: content"),
    ("PUT", SKILL, {}, ["body", "enabled"], "missing", "missing required field: enabled"),
    (
        "POST",
        TURN,
        {"user_message": "hi"},
        ["body", "turn_index"],
        "missing",
        "missing required field: turn_index",
    ),
    (
        "POST",
        BATCH,
        {"turns": [{"session_id": "s", "turn_index": 0, "user_message": "x"}] * 501},
        ["body", "turns"],
        "too_long",
        "at most 500 turns per request, got 501: split them into requests of 500 or fewer",
    ),
    (
        "POST",
        BATCH,
        {"turns": []},
        ["body", "turns"],
        "too_short",
        "turns is an empty list: send at least 1",
    ),
    (
        "POST",
        SEARCH,
        {"query": "x", "sources": []},
        ["body", "sources"],
        "too_short",
        "sources is an empty list: send at least 1, or leave it out",
    ),
    (
        "PUT",
        FILE,
        ["x"],
        ["body"],
        "model_attributes_type",
        'the body must be a JSON object such as {"content": "…"}, not an array',
    ),
    (
        "PUT",
        SKILL,
        "yes",
        ["body"],
        "model_attributes_type",
        'the body must be a JSON object such as {"enabled": true}, not a string',
    ),
    (
        "POST",
        SEARCH,
        None,
        ["body"],
        "model_attributes_type",
        'the body must be a JSON object such as {"query": "…"}, not null',
    ),
    (
        "POST",
        SEARCH,
        {"query": "x", "top_k": "5"},
        ["body", "top_k"],
        "int_type",
        'top_k must be a JSON integer from 1 to 100: send 5, not "5"',
    ),
    (
        "POST",
        SEARCH,
        {"query": "x", "top_k": 5.5},
        ["body", "top_k"],
        "int_type",
        "top_k must be a JSON integer from 1 to 100; got 5.5",
    ),
    (
        "PUT",
        FILE,
        {"content": "x", "expected_version": -1},
        ["body", "expected_version"],
        "greater_than_equal",
        "expected_version must be a JSON integer from 0 to 2147483647; got -1",
    ),
    (
        "PUT",
        SKILL,
        {"enabled": "no"},
        ["body", "enabled"],
        "bool_type",
        'enabled must be true or false (a JSON boolean); got "no"',
    ),
    (
        "PUT",
        FILE,
        {"content": 5},
        ["body", "content"],
        "string_type",
        "content must be a JSON string; got 5",
    ),
    (
        "POST",
        SEARCH,
        {"query": "x", "sources": ["web"]},
        ["body", "sources", "0"],  # a string, as ever
        "literal_error",
        "sources[0] must be 'memory', 'conversation' or 'notes'; got \"web\"",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "loc", "kind", "msg"), CASES)
def test_each_mistake_is_said_in_the_readers_words(
    client: TestClient,
    auth: AuthHeader,
    method: str,
    path: str,
    body: object,
    loc: list[object],
    kind: str,
    msg: str,
) -> None:
    sent = json.dumps(body).encode()  # null too, which httpx's json=None leaves out
    response = client.request(method, path, headers={**auth(), **JSON}, content=sent)
    detail, errors = _refused(response)
    assert errors == [{"loc": loc, "msg": msg, "type": kind}]
    assert detail == f"invalid request: {msg}"


def test_an_empty_body_is_told_what_to_send(client: TestClient, auth: AuthHeader) -> None:
    """pydantic said ``body: Field required``."""
    response = client.put(FILE, headers={**auth(), **JSON}, content=b"")
    msg = 'the body is empty: send a JSON object such as {"content": "…"}'
    assert _refused(response) == (
        f"invalid request: {msg}",
        [{"loc": ["body"], "msg": msg, "type": "missing"}],
    )


def test_several_mistakes_are_each_listed(client: TestClient, auth: AuthHeader) -> None:
    body = {"content": 5, "expected_version": "3", "extra": 1}
    detail, errors = _refused(client.put(FILE, headers=auth(), json=body))
    assert [e["msg"] for e in errors] == [
        "content must be a JSON string; got 5",
        'expected_version must be a JSON integer from 0 to 2147483647: send 3, not "3"',
        f"unknown field extra; {FILE_FIELDS}",
    ]
    assert detail == "invalid request: " + "; ".join(e["msg"] for e in errors)


def test_our_own_wording_and_malformed_json_keep_their_loc_prefix(
    client: TestClient, auth: AuthHeader
) -> None:
    """A message a validator of ours worded says what to do already: kept, under its
    field's name as before."""
    detail, errors = _refused(client.put(FILE, headers=auth(), json={"content": "x", "version": 1}))
    assert errors[0]["msg"].startswith("unknown field: send the version you edited")
    assert detail == f"invalid request: body.version: {errors[0]['msg']}"
    broken = client.put(FILE, headers={**auth(), **JSON}, content=b'{"content": ')
    detail, errors = _refused(broken)
    assert detail.startswith("invalid request: body: malformed JSON at character")


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"),
    [
        ("PUT", FILE, {"content": "a\x00b"}, ["body", "content"]),
        ("POST", SEARCH, {"query": "   "}, ["body", "query"]),
        ("POST", SEARCH, {"query": "x", "top_k": 0}, ["body", "top_k"]),
        ("POST", TURN, {"turn_index": 0, "user_message": "a\x00b"}, ["body", "user_message"]),
        ("POST", TURN, {"turn_index": 0}, ["body"]),  # no one field is at fault
    ],
)
def test_a_service_refusal_names_its_field_in_errors(
    client: TestClient, auth: AuthHeader, method: str, path: str, body: object, loc: list[str]
) -> None:
    """``InvalidContentError`` 422s had ``errors: []``."""
    detail, errors = _refused(client.request(method, path, headers=auth(), json=body))
    assert errors == [{"loc": loc, "msg": detail, "type": "value_error"}]


def test_a_batch_turns_mistakes_are_said_in_the_same_words(
    client: TestClient, auth: AuthHeader
) -> None:
    turns = [
        {"session_id": "s1", "turn_index": 0, "user_message": "hi", "extra": 1},
        {"turn_index": 1, "user_message": "hi"},
        {"session_id": "s1", "turn_index": "2", "user_message": "hi"},
    ]
    response = client.post(BATCH, headers=auth(), json={"turns": turns})
    assert response.status_code == 422, response.text
    assert [e["error"] for e in response.json()["errors"]] == [
        "unknown field extra; a turn takes turn_index, user_message, assistant_reply, "
        "timestamp, session_id",
        "missing required field: session_id",
        'turn_index must be a JSON integer from 0 to 2147483647: send 2, not "2"',
    ]

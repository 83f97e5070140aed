"""Bad input at the REST entry points found against a live server: each gets the spec's
status and a message that says how to fix it, and nothing is written.

Unknown body fields (a lost update through the GET body sent back), bodies that are not
UTF-8, too deep or hold a too-long number, a body not sent as JSON, file names with "/" or
none at all, and If-Match sent on several lines or with unbalanced quotes.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from memstrata.api.routers.config import parse_if_match
from tests.api.auth import AuthHeader
from tests.api.conftest import plain

FILE = "/api/config/agent-files/user"
SKILL = "/api/config/skills/web_search"
SEARCH = "/api/memory/search"
JSON = {"Content-Type": "application/json"}
VERSION_HINT = (
    "unknown field: send the version you edited as expected_version "
    '(or as the If-Match header, e.g. If-Match: "3")'
)


def _stored(client: TestClient, auth: AuthHeader) -> tuple[str, int]:
    file = client.get(FILE, headers=auth()).json()
    return file["content"], file["version"]


def _edited_to_version_2(client: TestClient, auth: AuthHeader) -> None:
    """Another writer (the agent, another tab) saved version 2 after our GET of version 1."""
    client.get(FILE, headers=auth())
    response = client.put(FILE, headers=auth(), json={"content": "B edit", "expected_version": 1})
    assert response.json()["version"] == 2


# -- 1. unknown body fields ---------------------------------------------------------------


def test_the_get_body_sent_back_is_refused_not_a_lost_update(
    client: TestClient, auth: AuthHeader
) -> None:
    """The client edits the GET body of version 1 and sends it back: ``version`` used to be
    ignored, so the write overwrote version 2 unchecked (200, no 409)."""
    _edited_to_version_2(client, auth)
    stale = {"name": "user", "file_type": "user_md", "content": "A edit", "version": 1}
    response = client.put(FILE, headers=auth(), json=stale)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "validation_error"
    assert {"loc": ["body", "version"], "msg": VERSION_HINT, "type": "extra_forbidden"} in body[
        "errors"
    ]
    assert {tuple(e["loc"]) for e in body["errors"]} == {
        ("body", "version"),
        ("body", "name"),
        ("body", "file_type"),
    }
    assert _stored(client, auth) == ("B edit", 2)
    # As the message says: the same version as expected_version is the spec's 409.
    fixed = {"content": "A edit", "expected_version": 1}
    assert client.put(FILE, headers=auth(), json=fixed).status_code == 409


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (
            {"content": "x", "expected_versoin": 1},
            "invalid request: unknown field expected_versoin; this body takes content, "
            "expected_version",
        ),
        ({"content": "x", "version": None}, f"invalid request: body.version: {VERSION_HINT}"),
        ({"content": "x", "version": 1}, f"invalid request: body.version: {VERSION_HINT}"),
    ],
)
def test_unknown_agent_file_fields_are_422(
    client: TestClient, auth: AuthHeader, body: dict[str, object], detail: str
) -> None:
    _edited_to_version_2(client, auth)
    response = client.put(FILE, headers=auth(), json=body)
    assert (response.status_code, response.json()["detail"]) == (422, detail)
    assert _stored(client, auth) == ("B edit", 2)


def test_unknown_skill_fields_are_422(client: TestClient, auth: AuthHeader) -> None:
    response = client.put(SKILL, headers=auth(), json={"enabled": False, "extra": 1})
    assert plain(response.json()) == {
        "detail": "invalid request: unknown field extra; this body takes enabled",
        "errors": [
            {
                "loc": ["body", "extra"],
                "msg": "unknown field extra; this body takes enabled",
                "type": "extra_forbidden",
            }
        ],
    }
    skills = client.get("/api/config/skills", headers=auth()).json()["skills"]
    assert {s["name"]: s["enabled"] for s in skills}["web_search"] is True


def test_the_documented_bodies_still_work(client: TestClient, auth: AuthHeader) -> None:
    """What spec §3 and the settings page send: ``{content}`` (+ If-Match), ``{enabled}``."""
    assert _stored(client, auth)[1] == 1
    ok = client.put(FILE, headers={**auth(), "If-Match": '"1"'}, json={"content": "x"})
    assert ok.status_code == 200, ok.text
    body = {"content": "y", "expected_version": 2}
    assert client.put(FILE, headers=auth(), json=body).json()["version"] == 3
    assert client.put(SKILL, headers=auth(), json={"enabled": False}).json()["enabled"] is False


# -- 2. bodies json.loads refuses beyond a JSONDecodeError ---------------------------------


@pytest.mark.parametrize(
    ("method", "path", "content", "msg"),
    [
        (
            "PUT",
            FILE,
            b'{"content":"caf\xe9"}',
            "the body must be UTF-8 JSON: byte 0xe9 at offset 15 is not UTF-8 "
            "(text in Latin-1 or another encoding?)",
        ),
        (
            "POST",
            SEARCH,
            b"[" * 5000 + b"]" * 5000,
            "the body's JSON is nested too deeply to decode (arrays or objects hundreds of "
            "levels inside each other); no memstrata request nests more than a few levels",
        ),
        (
            "POST",
            SEARCH,
            b'{"query":"x","top_k":' + b"9" * 5000 + b"}",
            "a number in the body is too long to decode (over 4300 digits); send numbers in "
            "the documented ranges",
        ),
    ],
    ids=["not-utf8", "too-deep", "number-too-long"],
)
def test_an_undecodable_body_is_the_documented_422(
    client: TestClient, auth: AuthHeader, method: str, path: str, content: bytes, msg: str
) -> None:
    """FastAPI answered these with its own 400 "There was an error parsing the body"."""
    response = client.request(method, path, content=content, headers={**auth(), **JSON})
    assert (response.status_code, plain(response.json())) == (
        422,
        {
            "detail": f"invalid request: body: {msg}",
            "errors": [{"loc": ["body"], "msg": msg, "type": "json_invalid"}],
        },
    ), response.text
    assert _stored(client, auth)[1] == 1  # nothing written (the GET provisions version 1)


def test_an_undecodable_body_from_a_stranger_is_still_401(client: TestClient) -> None:
    response = client.put(FILE, content=b'{"content":"caf\xe9"}', headers=JSON)
    assert response.status_code == 401


# -- 3. a body not sent as JSON -------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "content_type", "sent"),
    [
        (
            "PUT",
            FILE,
            "application/x-www-form-urlencoded",
            "as 'application/x-www-form-urlencoded'",
        ),
        ("POST", SEARCH, "text/plain", "as 'text/plain'"),
        ("PUT", SKILL, None, "without a Content-Type"),
    ],
)
def test_a_json_body_with_the_wrong_content_type_says_to_send_json(
    client: TestClient,
    auth: AuthHeader,
    method: str,
    path: str,
    content_type: str | None,
    sent: str,
) -> None:
    """curl -d sends application/x-www-form-urlencoded; the answer used to be pydantic's
    "Input should be a valid dictionary or object to extract fields from"."""
    body = {FILE: b'{"content":"x"}', SEARCH: b'{"query":"x"}', SKILL: b'{"enabled":false}'}
    headers = auth() if content_type is None else {**auth(), "Content-Type": content_type}
    response = client.request(method, path, content=body[path], headers=headers)
    msg = f"the body was sent {sent}, not as JSON: send it with Content-Type: application/json"
    assert (response.status_code, plain(response.json())) == (
        422,
        {
            "detail": f"invalid request: body: {msg}",
            "errors": [{"loc": ["body"], "msg": msg, "type": "content_type"}],
        },
    ), response.text
    assert _stored(client, auth)[1] == 1


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/x+json"])
def test_json_content_types_are_parsed(
    client: TestClient, auth: AuthHeader, content_type: str
) -> None:
    headers = {**auth(), "Content-Type": content_type}
    response = client.put(FILE, content=b'{"content":"x"}', headers=headers)
    assert (response.status_code, response.json()["version"]) == (200, 1)


# -- 4. file names with "/" or none: authentication first, then spec §3's 400 --------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/config/agent-files/a%2Fb"),
        ("GET", "/api/config/agent-files/"),
        ("GET", "/api/config/agent-files"),
        ("PUT", "/api/config/agent-files"),
        ("GET", "/api/config/agent-files/user/x"),
        ("PUT", "/api/config/agent-files/user/x"),
        ("PUT", "/api/config/agent-files/"),
        ("PUT", "/api/config/agent-files/%0A"),
    ],
)
def test_a_file_name_with_a_slash_or_none_is_401_then_400(
    client: TestClient, auth: AuthHeader, method: str, path: str
) -> None:
    # Not followed: a redirect would be an answer before authentication.
    stranger = client.request(method, path, json={"content": "x"}, follow_redirects=False)
    assert (stranger.status_code, stranger.json()["code"]) == (401, "unauthorized"), stranger.text
    response = client.request(
        method, path, headers=auth(), json={"content": "x"}, follow_redirects=False
    )
    assert (response.status_code, response.json()["code"]) == (400, "invalid_file_name")
    assert response.json()["detail"] == "无效的文件名"  # spec §3, verbatim


@pytest.mark.parametrize("path", ["/api/config/skills/a%2Fb", "/api/config/skills/"])
def test_a_skill_name_with_a_slash_or_none_is_401_then_404(
    client: TestClient, auth: AuthHeader, path: str
) -> None:
    assert client.put(path, json={"enabled": True}).status_code == 401
    response = client.put(path, headers=auth(), json={"enabled": True})
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert "; installed skills: code_interpreter, file_manager" in response.json()["detail"]


# -- 5. If-Match on several lines, unbalanced quotes ----------------------------------------


@pytest.mark.parametrize(
    ("lines", "shown"),
    [
        (['"1"', '"999"'], '"1", "999"'),
        (['"1"', '"1"'], '"1", "1"'),
        (['"1"', "*"], '"1", *'),
        (['"1'], '"1'),
        (['1"'], '1"'),
        (['W/"1'], 'W/"1'),
        (["W/1"], "W/1"),
    ],
)
def test_if_match_on_several_lines_or_unbalanced_is_400(
    client: TestClient, auth: AuthHeader, lines: list[str], shown: str
) -> None:
    """The second line used to be ignored and a stray quote accepted: the write was applied
    as if If-Match were "1"."""
    before = _stored(client, auth)
    assert before[1] == 1
    headers = [*auth().items(), *(("If-Match", line) for line in lines)]
    response = client.put(FILE, headers=headers, json={"content": "x"})
    assert response.status_code == 400, response.text
    assert (response.status_code, plain(response.json())) == (
        400,
        {"detail": f'If-Match must be one ETag as returned by GET, such as "3"; got {shown!r}'},
    )
    assert _stored(client, auth) == before


@pytest.mark.parametrize(
    ("lines", "version"),
    [
        ([], None),
        (["*"], None),
        ([" * "], None),
        (['"3"'], 3),
        (['W/"3"'], 3),
        (["3"], 3),
        # The column's bound: versions past a billion come from `memstrata db restored`.
        (['"2147483647"'], 2147483647),
    ],
)
def test_parse_if_match(lines: list[str], version: int | None) -> None:
    assert parse_if_match(lines) == version


def test_the_skill_list_with_a_trailing_slash_is_still_the_list(
    client: TestClient, auth: AuthHeader
) -> None:
    """The PUT route's ``{skill_name:anything}`` also matches an empty name, which turned
    ``GET /api/config/skills/`` from the list (through a redirect) into a 405."""
    response = client.get("/api/config/skills/", headers=auth())
    assert response.status_code == 200, response.text
    assert response.json() == client.get("/api/config/skills", headers=auth()).json()


def test_one_trailing_slash_names_the_same_file_and_skill(
    client: TestClient, auth: AuthHeader
) -> None:
    """``user/`` used to reach ``user`` through Starlette's redirect; since names may hold
    "/" it is read as the same name, not refused as an invalid one."""
    assert client.get(FILE + "/").status_code == 401
    got = client.get(FILE + "/", headers=auth())
    assert got.status_code == 200, got.text
    assert got.json() == client.get(FILE, headers=auth()).json()
    put = client.put(FILE + "/", headers=auth(), json={"content": "slash"})
    assert put.status_code == 200, put.text
    assert client.get(FILE, headers=auth()).json()["content"] == "slash"
    skill = client.put(SKILL + "/", headers=auth(), json={"enabled": False})
    assert (skill.status_code, skill.json()["enabled"]) == (200, False), skill.text
    for bad in ("/api/config/agent-files/user//", "/api/config/agent-files//"):
        assert client.get(bad, headers=auth()).status_code == 400

"""HTTP hygiene found by fuzzing and probing (issue: reliability under load and faults).

Each test pins one rule: out-of-range numbers are 4xx, authentication comes before body
parsing, one error shape, no Host-built redirects, enums in the OpenAPI document, offline
docs, JSON-only logs, JWT leeway and key ids, session-id characters.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import DataError

from memstrata.api import create_app
from memstrata.api.errors import map_exception
from memstrata.api.token_keys import key_id, mint_token
from memstrata.config import Settings
from memstrata.logs import configure_logging, event_fields
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader, bearer
from tests.api.conftest import TokenFactory

FILES = "/api/config/agent-files/{}"
TURN = "/api/memory/conversations/{}/turns"
INT_OVER = 2**31


# -- numbers ------------------------------------------------------------------------------


def test_expected_version_over_int32_is_a_4xx(client: TestClient, auth: AuthHeader) -> None:
    body = {"content": "x", "expected_version": INT_OVER}
    response = client.put(FILES.format("memory"), headers=auth(), json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "validation_error"
    assert response.json()["detail"] == (
        "invalid request: expected_version must be a JSON integer from 0 to 2147483647; "
        f"got {INT_OVER}"
    )
    ok = client.put(FILES.format("memory"), headers=auth(), json={**body, "expected_version": 0})
    assert ok.status_code == 200


def test_if_match_over_int32_is_400(client: TestClient, auth: AuthHeader) -> None:
    response = client.put(
        FILES.format("memory"),
        headers={**auth(), "If-Match": f'"{INT_OVER * 10}"'},
        json={"content": "x"},
    )
    assert response.status_code == 400


def test_turn_index_over_int32_is_a_4xx(client: TestClient, auth: AuthHeader) -> None:
    response = client.post(
        TURN.format("s1"), headers=auth(), json={"turn_index": INT_OVER, "user_message": "hi"}
    )
    assert response.status_code == 422


def test_a_database_range_error_is_400_not_500() -> None:
    mapped = map_exception(DataError("INSERT", {}, Exception("integer out of range")))
    assert mapped is not None
    assert (mapped.status_code, mapped.body["code"]) == (400, "value_out_of_range")


# -- authentication first -----------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{not json", b'{"content": 1}', b"[]"])
def test_unauthenticated_bad_body_is_401(client: TestClient, body: bytes) -> None:
    response = client.put(
        FILES.format("memory"), content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


def test_unauthenticated_bad_search_is_401(client: TestClient) -> None:
    response = client.post(
        "/api/memory/search", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 401


# -- one error shape ----------------------------------------------------------------------


def test_every_error_has_code_detail_and_english_message(
    client: TestClient, auth: AuthHeader
) -> None:
    responses = [
        client.get(FILES.format("nope"), headers=auth()),  # 400
        client.get(FILES.format("user")),  # 401
        client.get("/nope"),  # 404
        client.delete("/healthz"),  # 405
        client.put(FILES.format("user"), headers=auth(), json={"content": 1}),  # 422
        client.put("/api/config/skills/teleport", headers=auth(), json={"enabled": True}),
    ]
    assert [r.status_code for r in responses] == [400, 401, 404, 405, 422, 404]
    for response in responses:
        body = response.json()
        assert isinstance(body["code"], str) and body["code"], body
        assert isinstance(body["detail"], str) and body["detail"], body
        assert body["message"].isascii(), body
    invalid = responses[0].json()
    assert invalid == {
        "code": "invalid_file_name",
        "detail": "无效的文件名",  # the spec's own words
        "message": "invalid file name: use one of user, soul, memory",
    }


# -- redirects, OpenAPI, docs -------------------------------------------------------------


def test_trailing_slash_redirect_does_not_trust_the_host_header(client: TestClient) -> None:
    response = client.get("/healthz/?a=1", headers={"Host": "evil.example"}, follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == "/healthz?a=1"


def test_openapi_lists_file_names_and_sources(client: TestClient, auth: AuthHeader) -> None:
    spec = client.get("/openapi.json").json()
    get_file = spec["paths"]["/api/config/agent-files/{name}"]["get"]
    (name,) = [p for p in get_file["parameters"] if p["name"] == "name"]
    assert sorted(name["schema"]["enum"]) == ["memory", "soul", "user"]
    search = spec["components"]["schemas"]["SearchRequest"]["properties"]["sources"]
    assert "conversation" in json.dumps(search)
    # Documented as an enum, but a bad name is still the spec's 400, not a 422.
    assert client.get(FILES.format("agents"), headers=auth()).status_code == 400


def test_docs_work_offline(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text and "https://" not in page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert asset in page.text
        assert client.get(f"/static-offline-docs/{asset}").status_code == 200


def test_docs_pages_cannot_be_framed(client: TestClient) -> None:
    """The settings page refused framing; the docs pages, where a token is pasted, did not."""
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        headers = client.get(path).headers
        assert headers["content-security-policy"] == "frame-ancestors 'none'", path
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == (
            "nosniff"
        )
    assert "x-frame-options" not in client.get("/healthz").headers  # the docs pages only


def test_docs_can_be_turned_off(settings: Settings, mem: Memstrata) -> None:
    app = create_app(settings.model_copy(update={"api_docs": False}), memstrata=mem)
    with TestClient(app) as client:
        assert client.get("/docs").status_code == 404
        assert client.get("/openapi.json").status_code == 200


# -- logs ---------------------------------------------------------------------------------


@pytest.fixture
def json_logs() -> Iterator[None]:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if getattr(handler, "_memstrata", False):
            root.removeHandler(handler)
    root.handlers[:] = before[0]
    root.setLevel(before[1])


def test_third_party_log_lines_are_json(
    json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", json_lines=True)
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 1)
    logging.getLogger("alembic.runtime.migration").info("Running upgrade 0001 -> 0002")
    logging.getLogger("memstrata.test").warning("plain message")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 3
    parsed = [json.loads(line) for line in lines]
    assert [p["logger"] for p in parsed] == [
        "uvicorn.error",
        "alembic.runtime.migration",
        "memstrata.test",
    ]


# -- JWT ----------------------------------------------------------------------------------


def test_clock_leeway_defaults_to_30_seconds(
    client: TestClient, make_token: TokenFactory, settings: Settings, mem: Memstrata
) -> None:
    skewed = make_token(exp=int(time.time()) - 5)
    headers = bearer(skewed)
    assert client.get(FILES.format("user"), headers=headers).status_code == 200
    strict = create_app(settings.model_copy(update={"jwt_leeway_s": 0}), memstrata=mem)
    with TestClient(strict) as strict_client:
        assert strict_client.get(FILES.format("user"), headers=headers).status_code == 401


def test_minted_tokens_carry_a_kid_and_foreign_keys_are_told_from_forgeries(
    client: TestClient, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    token = mint_token(settings, "alice", 60)
    assert settings.jwt_secret is not None
    assert jwt.get_unverified_header(token)["kid"] == key_id(settings.jwt_secret)
    other_secret = "another-deployment-secret-0123456789abcdef"
    foreign = mint_token(settings.model_copy(update={"jwt_secret": other_secret}), "alice", 60)
    head, claims, signature = token.split(".")
    forged = f"{head}.{claims}.{signature[:-4]}AAAA"
    events = []
    for bad in (foreign, forged):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memstrata.api.auth"):
            response = client.get(FILES.format("user"), headers=bearer(bad))
        assert response.status_code == 401
        events.append([event_fields(r).get("event") for r in caplog.records])
    assert "auth.token.foreign_key" in events[0]
    assert "auth.token.forged" in events[1]


# -- session ids --------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", ["a%2Fb", "a%5Cb", "a%01b", "a%0Ab", "s" * 201])
def test_bad_session_ids_are_400(client: TestClient, auth: AuthHeader, session_id: str) -> None:
    response = client.post(
        TURN.format(session_id), headers=auth(), json={"turn_index": 0, "user_message": "hi"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_session_id"
    assert response.json()["detail"].endswith(
        "printable characters without '/' or '\\', e.g. 'chat-2026-12-06'"
    )


@pytest.mark.parametrize("session_id", ["chat-2026.12.03", "a:b_c", "会话一"])
def test_allowed_session_ids(client: TestClient, auth: AuthHeader, session_id: str) -> None:
    response = client.post(
        TURN.format(session_id), headers=auth(), json={"turn_index": 0, "user_message": "hi"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("PUT", FILES.format("nope"), "invalid_file_name"),
        ("POST", "/api/memory/conversations/a%2Fb/turns", "invalid_session_id"),
        ("POST", "/api/memory/conversations/%20/turns", "invalid_session_id"),
        ("POST", "/api/memory/conversations/caf%E9/turns", "invalid_session_id"),
    ],
)
@pytest.mark.parametrize("body", [b"{not json", b'{"content": 1}', b"\xff\xfe"])
def test_a_bad_name_in_the_url_is_400_whatever_the_body(
    client: TestClient, auth: AuthHeader, method: str, path: str, code: str, body: bytes
) -> None:
    """FastAPI parses the body before any dependency: the URL's 400 (spec §3 for a file
    name) used to turn into a 422 when the body was not JSON."""
    headers = {**auth(), "Content-Type": "application/json"}
    response = client.request(method, path, content=body, headers=headers)
    assert (response.status_code, response.json()["code"]) == (400, code), response.text


def test_a_good_name_with_a_malformed_body_is_still_422(
    client: TestClient, auth: AuthHeader
) -> None:
    headers = {**auth(), "Content-Type": "application/json"}
    for path in (FILES.format("user"), "/api/memory/conversations/s1/turns"):
        method = "PUT" if "agent-files" in path else "POST"
        response = client.request(method, path, content=b"{not json", headers=headers)
        assert response.status_code == 422, response.text
    stranger = client.put(FILES.format("nope"), content=b"{not json")
    assert stranger.status_code == 401  # authentication still comes first


def test_a_session_id_that_is_not_utf8_is_refused_not_merged(
    client: TestClient, auth: AuthHeader
) -> None:
    """caf%E9 and caf%E8 (Latin-1) both decoded to caf\ufffd: the second turn replaced the
    first session's turn. Any U+FFFD in a session id is refused, on every route."""
    turn = {"turn_index": 0, "user_message": "first", "assistant_reply": "a"}
    for raw in ("caf%E9", "caf%E8", "a%ED%A0%80b", "a%EF%BF%BDb"):
        response = client.post(f"/api/memory/conversations/{raw}/turns", json=turn, headers=auth())
        assert response.status_code == 400, (raw, response.text)
        assert "U+FFFD" in response.json()["detail"]
    batch = {"turns": [{**turn, "session_id": "caf\ufffd"}]}
    response = client.post("/api/memory/conversations/turns:batch", json=batch, headers=auth())
    assert response.status_code == 422
    assert response.json()["errors"][0]["session_id"] == "caf\ufffd"
    ok = client.post("/api/memory/conversations/caf%C3%A9/turns", json=turn, headers=auth())
    assert ok.status_code == 200 and ok.json()["file_path"] == "sessions/café/0"


def test_max_lifetime_bounds_how_long_a_token_still_works(
    client: TestClient, make_token: TokenFactory, settings: Settings, mem: Memstrata
) -> None:
    now = int(time.time())
    year = make_token(exp=now + 365 * 86400)
    hour = make_token(exp=now + 3600)
    assert client.get(FILES.format("user"), headers=bearer(year)).status_code == 200  # unset
    bounded = settings.model_copy(update={"jwt_max_lifetime_s": 3600.0})
    with TestClient(create_app(bounded, memstrata=mem)) as bounded_client:
        refused = bounded_client.get(FILES.format("user"), headers=bearer(year))
        assert refused.status_code == 401
        assert refused.json()["detail"] == (
            "token lives too long: it expires more than 3600 s from now, the most this "
            "server accepts (MEMSTRATA_JWT_MAX_LIFETIME_S); ask the issuer for a shorter 'exp'"
        )
        # An 'exp' too large for a float is refused the same way, not a 500.
        huge = bounded_client.get(FILES.format("user"), headers=bearer(make_token(exp=10**400)))
        assert huge.status_code == 401 and huge.json()["detail"] == refused.json()["detail"]
        assert bounded_client.get(FILES.format("user"), headers=bearer(hour)).status_code == 200

"""The error mapping: the pure table, and each status over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from memstrata.api.errors import ApiError, map_exception
from memstrata.errors import (
    ContentTooLargeError,
    EmbeddingError,
    InvalidContentError,
    InvalidFileTypeError,
    SandboxError,
    SandboxPathError,
    UnknownSkillError,
    VersionConflictError,
)
from tests.api.auth import AuthHeader
from tests.api.conftest import plain


@pytest.mark.parametrize(
    ("exc", "status", "body"),
    [
        (InvalidFileTypeError("无效的文件名: 'x'"), 400, {"detail": "无效的文件名"}),
        (ValueError("top_k must be positive"), 400, {"detail": "top_k must be positive"}),
        (
            VersionConflictError("alice", "user_md", 3, 4),
            409,
            {
                "detail": "version conflict on USER.md: expected version 3, found version 4; "
                "read it again and apply your change to version 4",
                "expected_version": 3,
                "current_version": 4,
            },
        ),
        (
            ContentTooLargeError(300, 200),
            413,
            {
                "detail": "content is 300 bytes, over the limit of 200 bytes "
                "(shorten the file; an operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
            },
        ),
        (
            InvalidContentError("bad"),
            422,
            {"detail": "bad", "errors": [{"loc": ["body"], "msg": "bad", "type": "value_error"}]},
        ),
        (
            InvalidContentError("query is blank", field="query"),
            422,
            {
                "detail": "query is blank",
                "errors": [
                    {"loc": ["body", "query"], "msg": "query is blank", "type": "value_error"}
                ],
            },
        ),
        (UnknownSkillError("no skill named 'x'"), 404, {"detail": "no skill named 'x'"}),
        (SandboxError("disk full"), 503, {"detail": "SandboxError: disk full"}),
        (SandboxPathError("../x"), 503, {"detail": "SandboxPathError: ../x"}),
        (EmbeddingError("timeout"), 503, {"detail": "EmbeddingError: timeout"}),
        (
            OperationalError("SELECT 1", {}, Exception("gone")),
            503,
            {"detail": "the database is unavailable; try again shortly"},
        ),
        (
            PoolTimeoutError("QueuePool limit of size 5 overflow 10 reached"),
            503,
            {"detail": "the database is unavailable; try again shortly"},
        ),
        (ApiError(418, "teapot", extra={"x": 1}), 418, {"detail": "teapot", "x": 1}),
    ],
)
def test_mapping_table(exc: Exception, status: int, body: dict[str, object]) -> None:
    mapped = map_exception(exc)
    assert mapped is not None
    assert (mapped.status_code, plain(mapped.body)) == (status, body)


@pytest.mark.parametrize("exc", [RuntimeError("bug"), KeyError("k"), ZeroDivisionError()])
def test_bugs_are_not_mapped(exc: Exception) -> None:
    assert map_exception(exc) is None


@pytest.fixture
def failing_client(app: FastAPI) -> Iterator[TestClient]:
    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret internals")

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_unhandled_error_is_a_bare_500(failing_client: TestClient) -> None:
    response = failing_client.get("/boom")
    assert (response.status_code, response.json()) == (
        500,
        {
            "code": "internal_error",
            "detail": "internal server error",
            "message": "internal server error",
        },
    )


def test_unknown_path_and_method(client: TestClient, auth: AuthHeader) -> None:
    assert client.get("/nope").json() == {
        "code": "not_found",
        "detail": "Not Found",
        "message": "Not Found",
    }
    response = client.delete("/api/config/skills", headers=auth())
    assert (response.status_code, response.json()) == (
        405,
        {
            "code": "method_not_allowed",
            "detail": "Method Not Allowed: this path takes GET",
            "message": "Method Not Allowed: this path takes GET",
        },
    )


def test_body_over_the_request_limit(client: TestClient, auth: AuthHeader) -> None:
    limit = 1024 * 1024
    body = b'{"enabled": true, "pad": "' + b"x" * limit + b'"}'
    response = client.put(
        "/api/config/skills/web_search",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert plain(response.json()) == {
        "detail": f"request body is {len(body)} bytes, over the limit of {limit} bytes (send "
        "a smaller body, e.g. a batch's turns over several requests; an operator can raise "
        "MEMSTRATA_MAX_REQUEST_BYTES)"
    }


def test_streamed_body_over_the_request_limit(client: TestClient, auth: AuthHeader) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"enabled": true, "pad": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}'

    response = client.put(
        "/api/config/skills/web_search",
        content=chunks(),
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["detail"].startswith("request body is at least ")


@pytest.mark.parametrize(
    ("body", "detail", "errors"),
    [
        (
            {},
            "invalid request: missing required field: enabled",
            [
                {
                    "loc": ["body", "enabled"],
                    "msg": "missing required field: enabled",
                    "type": "missing",
                }
            ],
        ),
        (
            {"enabled": "yes"},
            'invalid request: enabled must be true or false (a JSON boolean); got "yes"',
            [
                {
                    "loc": ["body", "enabled"],
                    "msg": 'enabled must be true or false (a JSON boolean); got "yes"',
                    "type": "bool_type",
                }
            ],
        ),
        ([True], None, None),
    ],
)
def test_invalid_bodies_are_422(
    client: TestClient,
    auth: AuthHeader,
    body: object,
    detail: str | None,
    errors: list[dict[str, object]] | None,
) -> None:
    response = client.put("/api/config/skills/web_search", headers=auth(), json=body)
    assert response.status_code == 422
    payload = response.json()
    assert set(payload) == {"code", "detail", "message", "errors"}
    if detail is not None:
        assert plain(payload) == {"detail": detail, "errors": errors}


def test_malformed_json_is_422(client: TestClient, auth: AuthHeader) -> None:
    response = client.put(
        "/api/config/skills/web_search",
        content=b'{"enabled": tru',
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert plain(response.json()) == {
        "detail": "invalid request: body: malformed JSON at character 13: Expecting value",
        "errors": [
            {
                "loc": ["body"],
                "msg": "malformed JSON at character 13: Expecting value",
                "type": "json_invalid",
            }
        ],
    }


def test_auth_is_checked_before_the_body(client: TestClient) -> None:
    response = client.put("/api/config/skills/web_search", content=b"{broken")
    assert response.status_code == 401

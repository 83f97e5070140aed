"""A bounded property-based fuzz of the whole OpenAPI document (schemathesis turns every
operation into a Hypothesis strategy) against the real app, database and sandboxes.

Properties: no 5xx for any generated request, authenticated or not; every ``/api/...``
route answers 401 without a token (health, metrics and docs stay open); every error has
the one error shape. Bounded by ``FUZZ_EXAMPLES`` per operation so ``make test`` stays
fast. (schemathesis' own pytest plugin is not used: it does not support pytest 9 yet.)
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from tests.api.auth import AuthHeader

FUZZ_EXAMPLES = 30


@pytest.mark.timeout(180)
def test_no_server_errors_and_auth_everywhere(app: FastAPI, auth: AuthHeader) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    checked: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=FUZZ_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: schemathesis.Case) -> None:
            where = (case.method, case.formatted_path)
            anonymous = case.call(headers={"Authorization": ""})
            assert anonymous.status_code < 500, (where, anonymous.text)
            if case.path.startswith("/api/"):
                assert anonymous.status_code == 401, (where, anonymous.text)
            signed_in = case.call(headers=auth("fuzz-user"))
            assert signed_in.status_code < 500, (where, signed_in.text)
            if signed_in.status_code >= 400:
                assert {"code", "detail", "message"} <= set(signed_in.json()), where

        fuzz()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert any(c.startswith("PUT /api/config/agent-files") for c in checked), checked


# Paths the OpenAPI document cannot produce (its names are enums): a "/" in a name, an
# empty name, an extra segment. They reach the routes too, so they are 401 first.
UNLISTED_PATHS = [
    ("GET", "/api/config/agent-files/a%2Fb"),
    ("GET", "/api/config/agent-files/"),
    ("GET", "/api/config/agent-files/user/x"),
    ("PUT", "/api/config/agent-files/a%2Fb"),
    ("PUT", "/api/config/agent-files/"),
    ("PUT", "/api/config/agent-files/user/x"),
    ("PUT", "/api/config/skills/a%2Fb"),
    ("PUT", "/api/config/skills/"),
    ("POST", "/api/memory/conversations/a%2Fb/turns"),
    ("POST", "/api/memory/conversations//turns"),
]


@pytest.mark.parametrize(("method", "path"), UNLISTED_PATHS)
def test_unlisted_api_paths_need_a_token_too(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, path, json={})
    assert (response.status_code, response.json()["code"]) == (401, "unauthorized"), response.text

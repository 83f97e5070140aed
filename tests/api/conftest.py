"""HTTP fixtures: the real app over the real database and a real directory sandbox.

Requests go through FastAPI's TestClient (httpx against the ASGI app). The runtime is
opened on the session database, so each test starts from truncated tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader, bearer

TokenFactory = Callable[..., str]


def plain(body: dict[str, Any]) -> dict[str, Any]:
    """An error body without the ``code`` and ``message`` every error has (checked by
    tests/api/test_hygiene.py), for comparing the rest."""
    assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), body
    return {k: v for k, v in body.items() if k not in ("code", "message")}


@pytest.fixture
def mem(open_runtime: Callable[..., Memstrata]) -> Memstrata:
    return open_runtime()  # BM25 only: these settings name no embedding API


@pytest.fixture
def app(mem: Memstrata) -> FastAPI:
    return create_app(memstrata=mem)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def make_token(settings: Settings) -> TokenFactory:
    """``make_token("alice")``; keyword overrides replace claims (``exp=None`` drops one)."""

    def factory(
        user: str = "alice",
        *,
        key: Any = None,
        algorithm: str = "HS256",
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {"sub": user, "iat": now, "exp": now + 600}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        signing_key = settings.jwt_secret if key is None else key
        assert signing_key is not None
        return jwt.encode(payload, signing_key, algorithm=algorithm, headers=headers)

    return factory


@pytest.fixture
def auth(make_token: TokenFactory) -> AuthHeader:
    """``auth("alice")`` → the Authorization header for a valid token of that user."""

    def header(user: str = "alice") -> dict[str, str]:
        return bearer(make_token(user))

    return header

"""No cache keeps an /api answer, and no browser sniffs any answer as another type.

The /api answers carry a user's memory (search hits, kept-aside copies, files) or say who
the caller is; without ``Cache-Control`` a shared cache or the browser's disk cache may
keep them. Every /api answer that sets no ``Cache-Control`` of its own gets ``no-store``
(a memory file's GET keeps its ``private, no-cache`` and ETag, which revalidate), and
every answer gets ``X-Content-Type-Options: nosniff``. The settings page keeps its own
``no-cache``, and /mcp still answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.mcp.messages import INIT, MCP_HEADERS

NO_STORE = "no-store"
COPY = "MEMORY.md.20260301T120000.000000Z.md"  # a kept-aside copy's name; alice has none


def _headers_of(response: httpx.Response) -> tuple[str | None, str | None]:
    return response.headers.get("cache-control"), response.headers.get("x-content-type-options")


def test_memory_bearing_answers_are_not_stored(client: TestClient, auth: AuthHeader) -> None:
    answers = {
        "search": client.post("/api/memory/search", json={"query": "tea"}, headers=auth()),
        "limits": client.get("/api/config/limits", headers=auth()),
        "conflicts": client.get("/api/memory/conflicts", headers=auth()),
        "one conflict": client.get(f"/api/memory/conflicts/{COPY}", headers=auth()),
        "skills": client.get("/api/config/skills", headers=auth()),
        "no token": client.get("/api/config/limits"),
        "unknown /api path": client.get("/api/nothing-here", headers=auth()),
    }
    seen = {name: (answer.status_code, *_headers_of(answer)) for name, answer in answers.items()}
    assert seen == {
        "search": (200, NO_STORE, "nosniff"),
        "limits": (200, NO_STORE, "nosniff"),
        "conflicts": (200, NO_STORE, "nosniff"),
        "one conflict": (404, NO_STORE, "nosniff"),
        "skills": (200, NO_STORE, "nosniff"),
        "no token": (401, NO_STORE, "nosniff"),
        "unknown /api path": (404, NO_STORE, "nosniff"),
    }


def test_a_memory_files_own_caching_is_kept(client: TestClient, auth: AuthHeader) -> None:
    answer = client.get("/api/config/agent-files/user", headers=auth())
    assert answer.status_code == 200
    assert _headers_of(answer) == ("private, no-cache", "nosniff")
    assert answer.headers["etag"] == '"1"'
    assert len(answer.headers.get_list("cache-control")) == 1


def test_the_page_and_the_probes_keep_their_headers(client: TestClient) -> None:
    """Outside /api nothing is added but nosniff: the page and its assets keep their
    ``no-cache`` (they revalidate, so a release's new page is seen), the probes none."""
    page, asset = client.get("/"), client.get("/web/app.js")
    assert (page.status_code, *_headers_of(page)) == (200, "no-cache", "nosniff")
    assert (asset.status_code, *_headers_of(asset)) == (200, "no-cache", "nosniff")
    assert len(page.headers.get_list("x-content-type-options")) == 1
    for path in ("/healthz", "/openapi.json", "/nowhere"):
        answer = client.get(path)
        assert _headers_of(answer) == (None, "nosniff"), path


def test_mcp_still_answers_with_nosniff(app: FastAPI) -> None:
    with TestClient(app, base_url="http://127.0.0.1:8700") as local:
        refused = local.post("/mcp", headers=MCP_HEADERS, json=INIT)
    assert refused.status_code == 401
    assert refused.headers["x-content-type-options"] == "nosniff"
    assert refused.headers.get("cache-control") is None  # not an /api answer


def test_mcp_initialize_is_answered(app: FastAPI, auth: AuthHeader) -> None:
    with TestClient(app, base_url="http://127.0.0.1:8700") as local:
        answer = local.post("/mcp", headers={**MCP_HEADERS, **auth()}, json=INIT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "mcp-session-id" in answer.headers


@pytest.fixture
def failing(app: FastAPI) -> Iterator[TestClient]:
    @app.get("/api/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def test_even_a_bugs_500_carries_them(failing: TestClient) -> None:
    """The 500 of an unexpected exception is written by Starlette's outermost middleware,
    outside every middleware the app adds: the headers are set outside it."""
    answer = failing.get("/api/boom")
    assert (answer.status_code, *_headers_of(answer)) == (500, NO_STORE, "nosniff")


def test_under_a_prefix_the_api_is_the_prefixed_one(mem: Memstrata, auth: AuthHeader) -> None:
    settings = mem.settings.model_copy(update={"api_prefix": "/mem"})
    with TestClient(create_app(settings, memstrata=mem)) as prefixed:
        inside = prefixed.get("/mem/api/config/limits", headers=auth())
        page = prefixed.get("/mem/")
    assert (inside.status_code, *_headers_of(inside)) == (200, NO_STORE, "nosniff")
    assert _headers_of(page) == ("no-cache", "nosniff")

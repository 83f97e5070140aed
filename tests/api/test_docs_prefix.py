"""``MEMSTRATA_API_PREFIX`` moves the interactive docs, the OpenAPI document and the docs'
assets with every other path (docs/API.md): with ``/mem`` they stayed at ``/docs``,
``/redoc`` and ``/openapi.json`` while the serve banner sent people to ``/mem/docs``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memstrata.api.app import create_app
from memstrata.config import Settings

# Every absolute path a docs page loads: stylesheet, scripts, favicon, schema, OAuth2 page.
LINKED_PATH = re.compile(r"""["'](/[^"'\s]*)["']""")
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


def _client(tmp_path: Path, prefix: str, *, docs: bool = True) -> TestClient:
    settings = Settings(
        environment="test", data_dir=tmp_path, jwt_secret="s" * 40, api_prefix=prefix, api_docs=docs
    )
    return TestClient(create_app(settings))  # no lifespan: these paths need no database


@pytest.mark.parametrize("prefix", ["", "/mem"])
def test_docs_schema_and_assets_follow_the_prefix(tmp_path: Path, prefix: str) -> None:
    client = _client(tmp_path, prefix)
    for path in DOCS_PATHS:
        assert client.get(prefix + path).status_code == 200, prefix + path
    assert f"{prefix}/api/config/skills" in client.get(f"{prefix}/openapi.json").json()["paths"]
    for page in ("/docs", "/redoc"):
        linked = set(LINKED_PATH.findall(client.get(prefix + page).text))
        assert f"{prefix}/openapi.json" in linked, (page, linked)
        for path in linked:
            assert path.startswith(f"{prefix}/"), (page, path)
            assert client.get(path).status_code == 200, (page, path)
    if prefix:
        for path in (*DOCS_PATHS, "/static-offline-docs/swagger-ui.css"):
            assert client.get(path).status_code == 404, path


def test_turning_the_docs_off_keeps_the_schema_under_the_prefix(tmp_path: Path) -> None:
    client = _client(tmp_path, "/mem", docs=False)
    assert client.get("/mem/openapi.json").status_code == 200
    for path in ("/mem/docs", "/mem/redoc", "/mem/static-offline-docs/swagger-ui.css"):
        assert client.get(path).status_code == 404, path

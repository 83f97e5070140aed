"""Serving the page (and not serving it), the limits endpoint, the serve banner, the diff."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Page

from memstrata.api.app import create_app
from memstrata.config import Settings
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES
from memstrata.web import ASSETS, CONTENT_SECURITY_POLICY
from tests.web.conftest import MAX_CONTENT_BYTES, OpenPage
from tests.web.server import Serve

STATIC = Path(__file__).parents[2] / "src" / "memstrata" / "web" / "static"


def test_the_page_and_its_assets_are_served(server: Serve) -> None:
    page = httpx.get(f"{server.url}/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "<title>memstrata · memory settings</title>" in page.text
    for name, media_type in ASSETS.items():
        asset = httpx.get(f"{server.url}/web/{name}")
        assert (asset.status_code, asset.headers["content-type"]) == (200, media_type)
    missing = httpx.get(f"{server.url}/web/index.py")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "no web asset named 'index.py'"
    assert httpx.get(f"{server.url}/web/..%2Fweb%2F__init__.py").status_code == 404
    assert httpx.get(f"{server.url}/docs").status_code == 200  # the API docs stay
    assert "/web/{name}" not in httpx.get(f"{server.url}/openapi.json").json()["paths"]


def test_every_static_file_is_listed_and_every_listed_file_exists() -> None:
    on_disk = {p.name for p in STATIC.iterdir()} - {"index.html"}
    assert on_disk == set(ASSETS)


def test_the_page_can_be_turned_off(tmp_path: Path) -> None:
    for enabled, status in ((True, 200), (False, 404)):
        settings = Settings(
            environment="test", data_dir=tmp_path, jwt_secret="s" * 40, web_ui=enabled
        )
        client = TestClient(create_app(settings))  # no lifespan: no database needed
        assert client.get("/").status_code == status
        assert client.get("/web/app.js").status_code == status


def test_the_page_follows_the_api_prefix(tmp_path: Path) -> None:
    settings = Settings(
        environment="test", data_dir=tmp_path, jwt_secret="s" * 40, api_prefix="/memory"
    )
    client = TestClient(create_app(settings))
    assert client.get("/memory/").status_code == 200
    assert client.get("/memory/web/app.js").status_code == 200
    redirect = client.get("/memory", follow_redirects=False)
    assert redirect.status_code in (307, 308)
    assert redirect.headers["location"].endswith("/memory/")
    assert client.get("/").status_code == 404


def test_limits_come_from_the_server(server: Serve, user: str) -> None:
    assert httpx.get(f"{server.url}/api/config/limits").status_code == 401
    with server.rest(user) as rest:
        limits = rest.get("/api/config/limits").json()
    assert limits == {
        "user_id": user,
        "max_content_bytes": MAX_CONTENT_BYTES,
        "max_request_bytes": 1024 * 1024,
        # 6 × 64 KiB + 4 KiB is less: a file's body is never held below the request limit
        "max_file_request_bytes": 1024 * 1024,
        "max_turn_bytes": MAX_TURN_BYTES,
        "files": [
            {"name": "soul", "filename": "SOUL.md"},
            {"name": "user", "filename": "USER.md"},
            {"name": "memory", "filename": "MEMORY.md"},
        ],
        "search_sources": ["memory", "conversation", "notes"],
        "max_top_k": 100,
        "max_query_chars": 4000,
    }


def test_serve_prints_the_page_and_how_to_get_a_token(server: Serve) -> None:
    lines = server.stdout.splitlines()
    assert f"  web page    {server.url}/  (paste a token to sign in)" in lines
    # `memstrata`, or its path in the virtual environment when that is not on PATH
    token_lines = [line for line in lines if line.startswith("  get a token ")]
    assert len(token_lines) == 1
    # then, for a server given its secret, "(with this server's MEMSTRATA_JWT_SECRET)"
    command = token_lines[0].removeprefix("  get a token ").split("  (")[0]
    assert command.endswith(" token --user alice")
    assert command.split(" ")[-4].split("/")[-1] == "memstrata", command


@pytest.fixture
def diff_page(open_page: OpenPage) -> Page:
    return open_page()


def _run_diff(page: Page, a: list[str], b: list[str]) -> list[dict[str, object]]:
    ops: list[dict[str, object]] = page.evaluate(
        "async ([a, b]) => (await import('./web/diff.js')).diffLines(a, b)", [a, b]
    )
    return ops


def test_the_line_diff_is_an_edit_script(diff_page: Page) -> None:
    rng = random.Random(14)
    for _ in range(60):
        a = [rng.choice("abcd") for _ in range(rng.randrange(12))]
        b = [rng.choice("abcd") for _ in range(rng.randrange(12))]
        ops = _run_diff(diff_page, a, b)
        assert [a[int(str(o["a"]))] for o in ops if o["op"] != "+"] == a
        assert [b[int(str(o["b"]))] if o["op"] != "-" else None for o in ops if o["op"] != "-"] == b
        for op in ops:
            if op["op"] == "=":
                assert a[int(str(op["a"]))] == b[int(str(op["b"]))]


def test_the_page_has_no_merge_of_its_own(diff_page: Page) -> None:
    # re-apply is the server's merge3 (POST web/merge, tests/web/test_merge.py): a second
    # implementation in the page disagreed with it
    exported = diff_page.evaluate("async () => Object.keys(await import('./web/diff.js')).sort()")
    assert exported == ["MAX_EDITS", "diffLines", "sideBySide", "splitLines"]
    for name in ASSETS:
        if name.endswith(".js"):
            assert "merge3" not in (STATIC / name).read_text(), name


def test_a_large_diff_stays_fast(diff_page: Page) -> None:
    a = [f"line {i}" for i in range(5000)]
    b = [f"other {i}" for i in range(5000)]
    ms: Callable[[], float] = lambda: diff_page.evaluate(  # noqa: E731
        "async ([a, b]) => { const d = await import('./web/diff.js'); const t = performance.now();"
        " d.diffLines(a, b); return performance.now() - t; }",
        [a, b],
    )
    assert ms() < 2000

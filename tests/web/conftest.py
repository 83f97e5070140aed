"""Browser tests: Debian's Chromium, driven by Playwright, against a real ``memstrata serve``.

One server and one browser for the whole package (starting them is the slow part); each
test uses its own user id, so tests never see each other's data. Every page a test opens
is watched: a JavaScript error or an unexpected console error fails the test.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, expect, sync_playwright

from memstrata.retrieval.local_server import LocalEmbeddingServer
from tests.web.browser import require_chromium
from tests.web.server import Serve

# Small, so that "over the limit" is quick to type and the page visibly shows the server's
# number rather than a constant of its own (the default is 256 KiB).
MAX_CONTENT_BYTES = 64 * 1024
_FAILED_LOAD = re.compile(r"Failed to load resource: the server responded with a status of (\d+)")

# Generous: the first read of a new user provisions and embeds its files, and the machine
# running the suite may be busy.
expect.set_options(timeout=20_000)


@pytest.fixture(scope="package")
def chromium() -> str:
    return require_chromium()


@pytest.fixture(scope="package")
def server(chromium: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """The server most tests use: BM25-only search, so that reads and writes never wait on
    an embedding model (a busy machine can make one slow; that is not what these test)."""
    serve = Serve(
        tmp_path_factory.mktemp("web-serve"),
        {"MEMSTRATA_DATABASE_URL": pg_url, "MEMSTRATA_MAX_CONTENT_BYTES": str(MAX_CONTENT_BYTES)},
    )
    serve.start()
    yield serve
    serve.stop()


@pytest.fixture(scope="package")
def hybrid_server(
    chromium: str,
    pg_url: str,
    embedding_server: LocalEmbeddingServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Serve]:
    """A second server with the real local embedding model: hybrid search, vector ranks."""
    spec = embedding_server.model_spec.model_dump(mode="json")
    serve = Serve(
        tmp_path_factory.mktemp("web-hybrid"),
        {
            "MEMSTRATA_DATABASE_URL": pg_url,
            "MEMSTRATA_EMBEDDING_MODELS": json.dumps([spec]),
            "MEMSTRATA_EMBEDDING_TIMEOUT_S": "60",
        },
    )
    serve.start()
    yield serve
    serve.stop()


@pytest.fixture(scope="package")
def browser(chromium: str) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium)
        yield launched
        launched.close()


@pytest.fixture
def user() -> str:
    return f"web-{uuid.uuid4().hex[:12]}"


@dataclass
class Console:
    """Console errors and uncaught exceptions of every page a test opened."""

    errors: list[str] = field(default_factory=list)
    allowed_statuses: set[int] = field(default_factory=set)
    allowed_text: list[str] = field(default_factory=list)

    def allow(self, *statuses: int, text: str | None = None) -> None:
        """HTTP errors the test provokes on purpose: Chromium logs each failed request."""
        self.allowed_statuses.update(statuses)
        if text:
            self.allowed_text.append(text)

    def watch(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type not in ("error", "assert"):
            return
        text = message.text
        status = _FAILED_LOAD.match(text)
        if status and int(status.group(1)) in self.allowed_statuses:
            return
        if any(allowed in text for allowed in self.allowed_text):
            return
        self.errors.append(f"console.{message.type}: {text}")


@pytest.fixture
def console() -> Iterator[Console]:
    watcher = Console()
    yield watcher
    assert watcher.errors == [], "console errors on the page"


OpenPage = Callable[..., Page]


@pytest.fixture
def open_page(browser: Browser, server: Serve, console: Console) -> Iterator[OpenPage]:
    """``open_page(width=1200)``: a new tab (its own sessionStorage) on the page, watched."""
    contexts = []

    def open_(width: int = 1200, height: int = 800, on: Serve | None = None) -> Page:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        console.watch(page)
        page.goto(f"{(on or server).url}/")
        return page

    yield open_
    for context in contexts:
        context.close()


def sign_in(page: Page, token: str) -> None:
    page.fill("#token", token)
    page.press("#token", "Enter")
    expect(page.locator("#editor")).to_be_enabled()


SignedIn = Callable[..., Page]


@pytest.fixture
def signed_in(open_page: OpenPage, server: Serve, user: str) -> SignedIn:
    """``signed_in()``: a new tab, signed in as the test's user, with the files loaded."""

    def open_(width: int = 1200, height: int = 800, on: Serve | None = None) -> Page:
        page = open_page(width, height, on)
        sign_in(page, (on or server).token(user))
        return page

    return open_


def append(page: Page, text: str) -> None:
    """Type ``text`` at the end of the editor."""
    page.locator("#editor").press("Control+End")
    page.locator("#editor").press_sequentially(text)


def answer_dialogs(page: Page, answers: list[bool]) -> list[str]:
    """Answer the page's dialogs in turn from ``answers`` (True: accept), a list the test may
    add to as it goes; returns the messages asked, in order."""
    asked: list[str] = []

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        if answers.pop(0):
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", answer)
    return asked


def tab(page: Page, name: str) -> None:
    """Select a file tab (``soul``/``user``/``memory``) and wait until it is loaded.

    Selecting a tab reads the file again: waiting for that answer, not only for a version
    on screen (an earlier read's), keeps a test's next write from racing the read."""
    with page.expect_response(
        lambda r: r.request.method == "GET" and r.url.split("?")[0].endswith(f"/{name}")
    ):
        page.click(f"#tab-{name}")
    expect(page.locator(f"#tab-{name}")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#file-version")).not_to_have_text("version –")


def edit_elsewhere(server: Serve, user: str, name: str, edit: Callable[[str], str]) -> int:
    """Another writer (the platform, the agent) changes file ``name`` from the stored text
    to ``edit(text)``, on the version it read (If-Match); returns the new version."""
    with server.rest(user) as rest:
        current = rest.get(f"/api/config/agent-files/{name}").json()
        written = rest.put(
            f"/api/config/agent-files/{name}",
            json={"content": edit(current["content"])},
            headers={"If-Match": f'"{current["version"]}"'},
        )
        written.raise_for_status()
        return int(written.json()["version"])


def write_elsewhere(server: Serve, user: str, name: str, first_line: str) -> None:
    """Another writer puts a line on top of the stored file."""
    edit_elsewhere(server, user, name, lambda text: first_line + "\n" + text)


def put_elsewhere(server: Serve, user: str, name: str, content: str) -> int:
    """Another writer replaces the stored file; returns the new version."""
    return edit_elsewhere(server, user, name, lambda _: content)


def stored_file(server: Serve, user: str, name: str) -> dict[str, Any]:
    """File ``name`` as the server holds it now (``version``, ``content``, ...)."""
    with server.rest(user) as rest:
        answer = rest.get(f"/api/config/agent-files/{name}")
        answer.raise_for_status()
        return dict(answer.json())


def shot(page: Page, name: str) -> None:
    """``WEB_TEST_SHOTS=<dir>``: save a screenshot of what a test checks, to look at (nothing
    is saved without it)."""
    shots = os.environ.get("WEB_TEST_SHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / name), full_page=True)

"""Screenshots of the page's views for the docs: ``python -m tests.web.screenshots docs/img``
(or ``make screenshots``).

Starts its own ``memstrata serve`` (embedded PostgreSQL, local embedding server) in a
temporary directory, fills one user's memory through the REST API, and captures the files
view, the conflict view, the places a re-apply leaves to the user, an agent's edit kept
aside and the search view with the system Chromium.

Two runs give the same bytes. The page's clock is fixed at ``NOW`` (and its time zone and
locale set), the turns are dated from it and the search is made as of it, so every date,
age, decay and score shown is the same on every run. What the server stamps with its own
clock while the script runs (MEMORY.md's save time, a kept-aside copy's time) and what it
measures (a search's timings) cannot be: the page is shown those as ``STAMPED`` and
``TIMING_MS`` (``_fixed_moments``), and nothing else of the server's answers is changed.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from playwright.sync_api import Page, Route, expect, sync_playwright

from memstrata.sandbox.dir_names import safe_dir_name
from tests.web.browser import INSTALL_HINT, find_chromium
from tests.web.server import Serve

USER = "alice"
# In the past: the server refuses to search as of a moment ahead of its clock.
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
STAMPED = (NOW - timedelta(minutes=5)).isoformat()
TIMING_MS = 2.5  # each stage of a search
PROFILE = """# USER.md — about your user

## Profile
- Name: Alice Martin
- What to call them: Alice
- Location: Lyon, France (Europe/Paris)
- Work: backend engineer, payments team

## Preferences
- Short answers first, details on request
- Metric units, 24-hour clock
- Drinks oolong tea, no coffee after noon

## Current projects
- Moving the team's CI to ephemeral runners
- Learning Italian (A2), practising on Tuesdays
"""
MEMORY = """# MEMORY.md

## Decisions
- 2026-11-20: Team standup moves to 9:30 on Mondays
- 2026-11-28: Biscuit's vet is Dr. Rossi, Clinique des Brotteaux
"""
# The agent changed the same line in its sandbox while Alice edited it in the page.
AGENT_MEMORY = MEMORY.replace("9:30 on Mondays", "9:15 on Mondays and Thursdays")
HUMAN_MEMORY = MEMORY.replace("9:30 on Mondays", "10:00 on Mondays")
TURNS = [
    (
        40,
        "We finally adopted the puppy! Her name is Biscuit.",
        "Congratulations! Biscuit is a great name. How old is she?",
    ),
    (12, "Biscuit has her first vet appointment on Friday at 9.", "Noted: vet on Friday at 9:00."),
    (
        2,
        "Can you remind me what food the vet recommended for Biscuit?",
        "The vet suggested a puppy kibble with 28% protein, three small meals a day.",
    ),
]


def main(out_dir: Path) -> None:
    # generous, as in the browser tests: a busy machine makes a save or a merge slow
    expect.set_options(timeout=30_000)
    chromium = find_chromium()
    if chromium is None:
        sys.exit(f"error: {INSTALL_HINT}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memstrata-shots-") as tmp:
        server = Serve(Path(tmp), {"MEMSTRATA_EMBEDDING_AUTOSTART": "true"}).start(timeout_s=120)
        try:
            _fill(server)
            _capture(server, chromium, out_dir)
        finally:
            server.stop()


def _fill(server: Serve) -> None:
    with server.rest(USER) as rest:
        user = rest.get("/api/config/agent-files/user").json()
        rest.put(
            "/api/config/agent-files/user",
            json={"content": PROFILE},
            headers={"If-Match": f'"{user["version"]}"'},
        ).raise_for_status()
        for index, (days, said, replied) in enumerate(TURNS):
            rest.post(
                "/api/memory/conversations/home/turns",
                json={
                    "turn_index": index,
                    "user_message": said,
                    "assistant_reply": replied,
                    "timestamp": (NOW - timedelta(days=days)).isoformat(),
                },
            ).raise_for_status()


def _kept_aside(server: Serve) -> None:
    """Alice's save wins over the agent's edit of the same line; the agent's is kept aside."""
    sandbox = server.workdir / "data" / "sandboxes" / safe_dir_name(USER)
    with server.rest(USER) as rest:
        first = rest.get("/api/config/agent-files/memory").json()
        stored = rest.put(
            "/api/config/agent-files/memory",
            json={"content": MEMORY},
            headers={"If-Match": f'"{first["version"]}"'},
        )
        stored.raise_for_status()
        (sandbox / "MEMORY.md").write_text(AGENT_MEMORY, encoding="utf-8")
        rest.put(
            "/api/config/agent-files/memory",
            json={"content": HUMAN_MEMORY},
            headers={"If-Match": f'"{stored.json()["version"]}"'},
        ).raise_for_status()


SOUL = """# SOUL.md

- Warm and direct; answers first, then the reasons
- Speaks French with Alice when she starts in French
- Keeps notes short: one fact a line
"""


def _places(server: Serve, page: Page) -> None:
    """Alice and the agent both rewrite one line of SOUL.md: re-apply leaves it to her."""
    with server.rest(USER) as rest:
        soul = rest.get("/api/config/agent-files/soul").json()
        rest.put(
            "/api/config/agent-files/soul",
            json={"content": SOUL},
            headers={"If-Match": f'"{soul["version"]}"'},
        ).raise_for_status()
    page.click("#tab-soul")
    editor = page.locator("#editor")
    expect(editor).to_have_value(SOUL)
    editor.fill(SOUL.replace("- Keeps notes short", "- Keeps notes short and dated"))
    with server.rest(USER) as rest:
        rest.put(
            "/api/config/agent-files/soul",
            json={"content": SOUL.replace("- Keeps notes short", "- Keeps notes in lists")},
            headers={"If-Match": '"2"'},
        ).raise_for_status()
    page.click("#file-save")
    page.click("#conflict-reapply")
    expect(page.locator("#resolve-list > li")).to_have_count(1)


def _fixed_moments(page: Page) -> None:
    """The search as of ``NOW``; the server's own stamps and timings as fixed ones."""

    def search(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        answer = route.fetch(post_data=json.dumps({**body, "as_of": NOW.isoformat()}))
        data = answer.json()
        data["timings_ms"] = {stage: TIMING_MS for stage in data.get("timings_ms") or {}}
        for hit in data["hits"]:
            if hit["source"] == "memory":  # a file: dated by its save during the run
                hit["created_at"] = STAMPED
        route.fulfill(response=answer, json=data)

    def kept_aside(route: Route) -> None:
        answer = route.fetch()
        data = answer.json()
        for copy in data["conflicts"]:
            copy["saved_at"] = STAMPED
        route.fulfill(response=answer, json=data)

    page.route("**/api/memory/search", search)
    page.route(re.compile(r"/api/memory/conflicts\?"), kept_aside)


def _signed_in(server: Serve, browser_page: Page) -> Page:
    _fixed_moments(browser_page)
    browser_page.clock.set_fixed_time(NOW)
    browser_page.goto(f"{server.url}/")
    browser_page.fill("#token", server.token(USER))
    browser_page.press("#token", "Enter")
    expect(browser_page.locator("#editor")).to_be_enabled(timeout=30_000)
    browser_page.click("#tab-user")
    expect(browser_page.locator("#file-version")).to_have_text("version 2", timeout=30_000)
    return browser_page


def _capture(server: Serve, chromium: str, out_dir: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        context = browser.new_context(
            viewport={"width": 1200, "height": 760}, timezone_id="UTC", locale="en-US"
        )
        page = _signed_in(server, context.new_page())
        editor = page.locator("#editor")
        editor.fill(editor.input_value().replace("(A2)", "(B1)"))
        page.screenshot(path=out_dir / "files.png")

        # someone else (the agent, another tab) saves first: the save shows the conflict
        with server.rest(USER) as rest:
            rest.put(
                "/api/config/agent-files/user",
                json={
                    "content": PROFILE.replace(
                        "- Metric units", "- Prefers email to calls\n- Metric units"
                    )
                },
                headers={"If-Match": '"2"'},
            ).raise_for_status()
        page.click("#file-save")
        expect(page.locator("#conflict")).to_be_visible()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=out_dir / "conflict.png")
        page.click("#conflict-reapply")  # so that leaving does not ask about unsaved text
        page.click("#file-save")
        expect(page.locator("#file-version")).to_have_text("version 4")

        _places(server, page)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=out_dir / "places.png")
        page.locator("#resolve-list > li").first.get_by_label(
            "Keep both, version 3's first"
        ).check()
        page.click("#resolve-apply")
        page.click("#file-save")
        expect(page.locator("#file-version")).to_have_text("version 4")

        _kept_aside(server)
        page.click("#tab-memory")
        notice = page.locator("#aside-list button").first
        expect(notice).to_be_visible(timeout=30_000)
        notice.click()  # View: the agent's text, read-only
        expect(notice).to_have_text("Hide")  # read: the text is shown, not still coming
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=out_dir / "kept-aside.png")

        page.click("#nav a[data-view=search]")
        page.fill("#query", "what food for Biscuit?")
        page.press("#query", "Enter")
        expect(page.locator(".hit").first).to_be_visible(timeout=30_000)
        page.screenshot(path=out_dir / "search.png")
        page.set_viewport_size({"width": 390, "height": 760})
        page.screenshot(path=out_dir / "search-phone.png")
        browser.close()
    for name in ("files", "conflict", "places", "kept-aside", "search", "search-phone"):
        print(out_dir / f"{name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))

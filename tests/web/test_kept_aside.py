"""The agent's edits that sync kept aside: a notice near the file's editor, View (the text,
read-only, as text) and Dismiss; and the server's error messages isolated from the page's
own words, so that a name or id they echo cannot reorder them.

The kept-aside copy is made as sync makes it: the agent edits a line of MEMORY.md in its
sandbox (the real directory of the server under test), and the user saves an edit of the
same line through the API before it is read back.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Dialog, Page, Route, expect

from memstrata.sandbox.state import CONFLICT_DIR
from tests.web.conftest import Console, OpenPage, SignedIn, append, sign_in, tab
from tests.web.kept_aside import AGENT, BASE, HUMAN, real_conflict, sandbox
from tests.web.server import Serve
from tests.web.test_bidi_and_ime import PDI, RLO, assert_drawn_in_order, assert_isolated

# WEB_TEST_SHOTS=<dir>: save what these tests check to look at (nothing is saved without it)
SHOTS = os.environ.get("WEB_TEST_SHOTS")


def _shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


def _no_sideways_scroll(page: Page) -> None:
    overflow = page.evaluate(
        "() => document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth"
    )
    assert overflow <= 0, overflow


def test_a_kept_aside_edit_is_shown_viewed_and_dismissed(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    copy = real_conflict(server, user)
    page = signed_in()
    tab(page, "memory")
    expect(page.locator("#editor")).to_have_value(HUMAN)
    notice = page.locator("#aside .aside-item")
    expect(notice).to_have_count(1)
    time = notice.locator(".aside-says time")
    expect(time).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z$"))
    expect(notice.locator(".aside-says")).to_have_text(
        f"An agent's edit of MEMORY.md from {time.inner_text()} was kept aside because it "
        "conflicted with yours."
    )
    view = notice.get_by_role("button", name=re.compile("^View"))
    expect(view).to_have_text(f"View ({len(AGENT.encode())} B)")
    view.click()
    shown = notice.locator("pre.aside-text")
    expect(shown).to_be_visible()
    # as text: the markup is characters on screen, no element was made, nothing ran
    expect(shown).to_have_text(AGENT)
    assert shown.evaluate("e => e.children.length") == 0
    assert page.evaluate("() => window.hacked") is None
    expect(notice.get_by_role("button", name="Hide")).to_have_attribute("aria-expanded", "true")
    _shot(page, "kept-aside.png")

    page.set_viewport_size({"width": 360, "height": 760})
    expect(notice.get_by_role("button", name="Dismiss")).to_be_visible()
    _no_sideways_scroll(page)
    _shot(page, "kept-aside-phone.png")

    tab(page, "user")  # another file's tab: not its notice
    expect(page.locator("#aside")).to_be_hidden()
    tab(page, "memory")
    expect(notice).to_have_count(1)

    asked: list[str] = []

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    notice.get_by_role("button", name="Dismiss").click()
    expect(page.locator("#aside")).to_be_hidden()
    assert asked and asked[0].startswith(
        "Dismiss the agent's kept-aside edit of \u2068MEMORY.md\u2069"
    )
    assert not copy.exists()
    expect(page.locator("#editor")).to_be_focused()
    with server.rest(user) as rest:
        assert rest.get("/api/memory/conflicts").json()["total"] == 0


def test_a_save_that_wins_over_an_agents_edit_shows_it_at_once(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    with server.rest(user) as rest:
        rest.put("/api/config/agent-files/memory", json={"content": BASE}).raise_for_status()
    page = signed_in()
    tab(page, "memory")
    expect(page.locator("#aside")).to_be_hidden()
    # meanwhile the agent's shell rewrites the same line, not yet read back
    (sandbox(server, user) / "MEMORY.md").write_text(AGENT)
    page.locator("#editor").fill(HUMAN)
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(re.compile(r"^Saved MEMORY\.md as version"))
    expect(page.locator("#aside .aside-item")).to_have_count(1)
    expect(page.locator("#aside .aside-says")).to_contain_text("conflicted with yours.")


def test_many_kept_aside_edits_come_a_few_at_a_time(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    real_conflict(server, user)  # the user's sandbox exists, with one real copy
    directory = sandbox(server, user) / CONFLICT_DIR
    for day in range(1, 8):  # older than the real one
        name = f"MEMORY.md.202501{day:02d}T120000.000000Z.rejected.md"
        (directory / name).write_text(f"copy {day}\n")
    page = signed_in()
    tab(page, "memory")
    items = page.locator("#aside .aside-item")
    expect(items).to_have_count(5)
    expect(items.nth(1).locator(".aside-says")).to_contain_text(
        "was kept aside because the server could not store it (too large, or not text)."
    )
    more = page.locator("#aside-more")
    expect(more).to_have_text("Show 3 more kept-aside edits")
    more.click()
    expect(items).to_have_count(8)
    expect(more).to_be_hidden()


def test_a_sandbox_that_fails_is_said_near_the_editor(
    signed_in: SignedIn, console: Console
) -> None:
    page = signed_in()
    body = {
        "conflicts": [],
        "total": None,
        "offset": 0,
        "limit": 5,
        "next_offset": None,
        "sandbox": "sandbox_failed",
        "warnings": [
            "the sandbox could not be listed (SandboxError): kept-aside copies "
            "cannot be shown; try again later"
        ],
    }
    page.route(
        "**/api/memory/conflicts?*",
        lambda route: route.fulfill(content_type="application/json", body=json.dumps(body)),
    )
    tab(page, "soul")
    problem = page.locator("#aside-problem")
    expect(problem).to_have_text(
        "Could not check for all kept-aside edits of SOUL.md: the sandbox could not be listed "
        "(SandboxError): kept-aside copies cannot be shown; try again later."
    )
    expect(page.locator("#editor")).to_be_enabled()  # the file itself is there to edit


# -- the server's error messages, isolated ---------------------------------------------------

ECHOED = f"no file named {PDI}{RLO}abc"  # a name the server echoes, with bidi controls


def _refuse(status: int, message: str) -> Callable[[Route], None]:
    def fulfill(route: Route) -> None:
        body = {"code": "x", "detail": message, "message": message, "errors": []}
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    return fulfill


def test_a_load_error_cannot_reorder_the_sentence_around_it(
    open_page: OpenPage, server: Serve, user: str, console: Console
) -> None:
    console.allow(503)
    page = open_page()
    page.route("**/api/config/agent-files/memory", _refuse(503, ECHOED))
    sign_in(page, server.token(user))
    page.click("#tab-memory")
    message = page.locator("#file-message")
    pieces = [
        "Could not load MEMORY.md. ",
        f"No file named {PDI}{RLO}abc.",
        " Press Retry to try again.",
    ]
    _shot(page, "load-error-bidi.png")
    assert_drawn_in_order(message, pieces, 1)
    assert_isolated(message.locator("bdi"), pieces[1])


def test_a_save_error_cannot_reorder_the_sentence_around_it(
    signed_in: SignedIn, console: Console
) -> None:
    console.allow(422)
    page = signed_in()
    tab(page, "user")
    page.route(
        "**/api/config/agent-files/user",
        lambda route: (
            _refuse(422, ECHOED)(route) if route.request.method == "PUT" else route.continue_()
        ),
    )
    append(page, "\nmore")
    page.click("#file-save")
    message = page.locator("#file-message")
    pieces = [
        "The server refused this text: ",
        f"{ECHOED}.",
        " Nothing was written; your text is still in the editor.",
    ]
    assert_drawn_in_order(message, pieces, 1)
    assert_isolated(message.locator("bdi"), pieces[1])

"""Saving a memory file when the server's answer is lost or uncertain (a gateway's 5xx, a
dropped connection, the server's shutdown): the page reads the file back before it says
whether the text was stored, and never loses what the user typed."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from playwright.sync_api import Route, expect

from tests.web.clock import pause_clock, says, step_until
from tests.web.conftest import Console, SignedIn, append, stored_file, tab, write_elsewhere
from tests.web.save_support import SAVED_LATE, next_save_is_no_conflict, on_put
from tests.web.server import Serve


def _answer_lost(route: Route) -> None:
    """A gateway that passes the save on, then loses the answer: the file is stored."""
    route.fetch()
    route.fulfill(status=502, body="")


def _gateway_down(route: Route) -> None:
    """A 502 with a gateway's own page for the save, a bare 504 for the read-back."""
    if route.request.method == "PUT":
        route.fulfill(status=502, content_type="text/html", body="<h1>502</h1>")
    else:
        route.fulfill(status=504, body="")


UNSETTLED = [
    pytest.param(
        _gateway_down,
        (502, 504),
        None,
        "The server had an error (HTTP 502 Bad Gateway).",
        "The server had an error (HTTP 502 Bad Gateway). Your text is still in the editor; it "
        "may or may not have been saved. Save again to make sure.",
        id="gateway",
    ),
    # The request may have reached the server before the connection failed: the page used
    # to say only "Check your connection, then save again".
    pytest.param(
        Route.abort,
        (),
        "net::ERR_FAILED",
        "The connection was lost while saving.",
        "Could not reach the server. Your text is still in the editor; it may or may not have "
        "been saved. Check your connection, then save again to make sure.",
        id="connection",
    ),
]

CHECKING = (
    " USER.md may still be saving on the server: checking again for up to 2 minutes. Your "
    "text is still in the editor."
)


@pytest.mark.parametrize(("fail", "statuses", "console_text", "why", "message"), UNSETTLED)
def test_a_save_the_read_back_cannot_settle_says_it_may_have_happened(
    signed_in: SignedIn,
    console: Console,
    fail: Callable[[Route], None],
    statuses: tuple[int, ...],
    console_text: str | None,
    why: str,
    message: str,
) -> None:
    """The save and every read-back that would tell fail: it stays unknown, and the page
    says so once it has stopped checking."""
    console.allow(*statuses, text=console_text)  # the failed requests Chromium logs
    page = signed_in()
    tab(page, "user")
    pause_clock(page)
    methods: list[str] = []

    def failing(route: Route) -> None:
        methods.append(route.request.method)
        fail(route)

    page.route("**/api/config/agent-files/user", failing)
    append(page, "\nedited")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(why + CHECKING)
    step_until(page, says(page.locator("#file-message"), "may or may not"))
    expect(page.locator("#file-message")).to_have_text(message)
    assert methods == ["PUT"] + ["GET"] * 9  # the file was read back, in vain
    assert page.locator("#editor").input_value().endswith("\nedited")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")


def test_a_save_whose_answer_was_lost_is_read_back_and_counts_as_saved(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(502)
    page = signed_in()
    tab(page, "user")
    methods = on_put(page, "user", _answer_lost)
    append(page, "\n- Likes oolong tea")
    mine = page.locator("#editor").input_value()
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_have_text(SAVED_LATE)
    expect(message).to_have_class("banner ok")
    assert methods == ["PUT", "GET"]
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Saved")
    expect(page.locator("#file-save")).to_be_disabled()
    expect(page.locator("#tab-user")).not_to_have_class("unsaved")
    assert page.locator("#editor").input_value() == mine
    next_save_is_no_conflict(page, server, user, mine)


def _cut_off_by_shutdown(route: Route) -> None:
    """The server's shutdown cuts the request off: its edit still lands (it finishes in a
    task of its own), the answer is the 503 ``shutting_down``."""
    route.fetch()
    route.fulfill(
        status=503,
        content_type="application/json",
        body=json.dumps(
            {
                "code": "shutting_down",
                "detail": "the server is shutting down; retry the request",
                "message": "the server is shutting down; retry the request",
            }
        ),
    )


def test_a_save_cut_off_by_the_servers_shutdown_is_read_back(
    signed_in: SignedIn, console: Console
) -> None:
    """A 503 with a readable body was taken for "nothing was written", so the next Save
    met the user's own stored write as a conflict."""
    console.allow(503)
    page = signed_in()
    tab(page, "user")
    methods = on_put(page, "user", _cut_off_by_shutdown)
    append(page, "\n- Rows on Sundays")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(SAVED_LATE)
    assert methods == ["PUT", "GET"]
    expect(page.locator("#file-state")).to_have_text("Saved")


def test_a_save_refused_by_a_gateway_is_read_back_and_said_not_written(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(502)
    page = signed_in()
    tab(page, "user")
    pause_clock(page)
    on_put(page, "user", lambda route: route.fulfill(status=502, body=""))  # never forwarded
    append(page, "\n- Likes oolong tea")
    mine = page.locator("#editor").input_value()
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_have_text("The server had an error (HTTP 502 Bad Gateway)." + CHECKING)
    step_until(page, says(message, "Not saved"))
    expect(message).to_have_text(
        "The server had an error (HTTP 502 Bad Gateway). Not saved: USER.md is still version 1 "
        "after checking for 2 minutes. Your text is still in the editor; save again."
    )
    expect(message).to_have_class("banner error")
    assert page.locator("#editor").input_value() == mine
    expect(page.locator("#file-version")).to_have_text("version 1")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    page.unroute("**/api/config/agent-files/user")
    page.click("#file-save")
    expect(message).to_have_text("Saved USER.md as version 2.")
    stored = stored_file(server, user, "user")
    assert (stored["version"], stored["content"]) == (2, mine)


def test_a_save_cut_off_after_it_was_stored_keeps_what_was_typed_meanwhile(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    """The connection drops once the write is stored (the page's fetch throws); the user
    typed on while the save was out: the read-back confirms the save, and the newer text
    stays in the editor, unsaved, on top of the new version."""
    console.allow(text="net::ERR_FAILED")
    page = signed_in()
    tab(page, "memory")
    held: list[Route] = []
    on_put(page, "memory", held.append)
    append(page, "\nTYPED BEFORE SAVE")
    sent = page.locator("#editor").input_value()
    page.click("#file-save")
    expect(page.locator("#file-state")).to_have_text("Saving…")
    append(page, "\nTYPED WHILE SAVING")
    while not held:
        page.wait_for_timeout(50)
    held[0].fetch()  # stored...
    held[0].abort()  # ...and the connection lost before the answer
    message = page.locator("#file-message")
    expect(message).to_have_text(
        "Saved MEMORY.md as version 2 (the server's answer was lost; the file was read back to "
        "check). What you typed since is not saved yet."
    )
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert page.locator("#editor").input_value() == sent + "\nTYPED WHILE SAVING"
    stored = stored_file(server, user, "memory")
    assert (stored["version"], stored["content"]) == (2, sent)
    page.unroute("**/api/config/agent-files/memory")
    page.click("#file-save")
    expect(message).to_have_text("Saved MEMORY.md as version 3.")
    expect(page.locator("#file-state")).to_have_text("Saved")


def test_a_lost_save_answer_with_a_newer_write_elsewhere_shows_the_conflict(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    """The read-back finds another writer's version: the conflict view, at once."""
    console.allow(502)
    page = signed_in()
    tab(page, "user")

    def written_elsewhere_then_lost(route: Route) -> None:
        write_elsewhere(server, user, "user", "WRITTEN ELSEWHERE")
        route.fulfill(status=502, body="")

    on_put(page, "user", written_elsewhere_then_lost)
    append(page, "\nTYPED HERE")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-text")).to_contain_text(
        "You started from version 1; version 2 is stored now."
    )
    stored = page.locator("[data-side=stored]")
    expect(stored.filter(has_text="WRITTEN ELSEWHERE")).to_have_class("cell by-them")
    mine = page.locator("[data-side=mine]")
    expect(mine.filter(has_text="TYPED HERE")).to_have_class("cell by-you")

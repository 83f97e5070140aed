"""A save while the server is out of reach (stopped, restarting) or the browser is offline:
the page's messages follow what happens next rather than staying as they were."""

from __future__ import annotations

from playwright.sync_api import Route, expect

from tests.web.clock import STEP_MS, pause_clock
from tests.web.conftest import Console, SignedIn, append, stored_file, tab
from tests.web.server import Serve

FILES = "**/api/config/agent-files/**"


def _refused(route: Route) -> None:
    """The server stopped: no connection."""
    route.abort("connectionrefused")


def test_a_save_check_ends_once_the_server_answers_again(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(text="net::ERR_CONNECTION_REFUSED")
    page = signed_in()
    tab(page, "user")
    pause_clock(page)
    page.route(FILES, _refused)  # the server is stopped mid-edit
    append(page, "\n- written while the server was down")
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_contain_text("USER.md may still be saving on the server")
    # the user looks at another file and back: both reads fail
    page.click("#tab-soul")
    page.click("#tab-user")
    expect(page.locator("#file-state")).to_have_text("Checking save…")
    expect(message).to_contain_text("USER.md may still be saving on the server")
    page.unroute(FILES, _refused)  # the server is back
    page.clock.fast_forward(STEP_MS)  # the check's next read: the server answers
    expect(message).to_have_text(
        "Not saved: the server could not be reached, and now that it answers, USER.md is "
        "still version 1. Your text is still in the editor; save again."
    )
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert stored_file(server, user, "user")["version"] == 1
    page.click("#file-save")
    expect(message).to_have_text("Saved USER.md as version 2.")


def test_a_save_while_offline_says_it_was_not_sent(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(text="net::ERR_INTERNET_DISCONNECTED")
    page = signed_in()
    tab(page, "user")
    append(page, "\n- written offline")
    page.context.set_offline(True)
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_have_text(
        "Not saved: this browser is offline, so USER.md was not sent. Your text is still in "
        "the editor; save again once you are back online."
    )
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    page.context.set_offline(False)
    page.click("#file-save")
    expect(message).to_have_text("Saved USER.md as version 2.")
    assert stored_file(server, user, "user")["content"].endswith("\n- written offline")

"""What the tests of a save whose answer is lost or late share (``test_file_save_errors``,
``test_save_outcomes``): routing a file's saves to a fault, the page's words for a save
the read-back found stored, and the save after it, which must build on that version."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, Route, expect

from tests.web.conftest import append, stored_file
from tests.web.server import Serve

SAVED_LATE = (
    "Saved USER.md as version 2 (the server's answer was lost; the file was read back to check)."
)


def on_put(page: Page, name: str, handle: Callable[[Route], None]) -> list[str]:
    """Route file ``name``'s PUTs to ``handle`` (its GETs reach the server); returns the
    methods of the requests routed, in order."""
    methods: list[str] = []

    def route(route: Route) -> None:
        methods.append(route.request.method)
        if route.request.method == "PUT":
            handle(route)
        else:
            route.continue_()

    page.route(f"**/api/config/agent-files/{name}", route)
    return methods


def next_save_is_no_conflict(page: Page, server: Serve, user: str, mine: str) -> None:
    """With the fault gone, the next save of USER.md builds on version 2, the user's own
    write the read-back found: it is stored as version 3, not met as a conflict."""
    page.unroute("**/api/config/agent-files/user")
    append(page, "\n- and green tea")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 3.")
    expect(page.locator("#conflict")).to_be_hidden()
    stored = stored_file(server, user, "user")
    assert (stored["version"], stored["content"]) == (3, mine + "\n- and green tea")

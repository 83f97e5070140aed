"""A conflict view on SOUL.md from three given texts, for the tests of re-apply."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.web.conftest import put_elsewhere, tab
from tests.web.server import Serve


def conflict_on(page: Page, server: Serve, user: str, base: str, mine: str, theirs: str) -> None:
    """The page on SOUL.md holding ``base``; another writer stores ``theirs``; the user
    saves ``mine``: the conflict view."""
    put_elsewhere(server, user, "soul", base)
    page.reload()  # signed in from the tab's storage: the files are read again
    tab(page, "soul")
    expect(page.locator("#editor")).to_have_value(base)
    put_elsewhere(server, user, "soul", theirs)
    page.fill("#editor", mine)
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()

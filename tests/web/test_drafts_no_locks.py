"""Drafts kept per tab where the browser has no Web Locks: `navigator.locks` exists only in
secure contexts, so a page served over plain HTTP from an address other than localhost has
none. The open tabs then answer on a BroadcastChannel (which works there), so that another
open tab's text is never offered (and moved) here, while a closed tab's still is. Each test
removes `navigator.locks` before the page's scripts run, in every tab of one profile."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.web.conftest import Console, sign_in
from tests.web.server import Serve
from tests.web.test_drafts_tabs import DRAFT_TEXTS, _typed

NO_LOCKS = "delete Navigator.prototype.locks;"
TAB_ID = "() => sessionStorage.getItem('memstrata.tab')"
NewTab = Callable[..., Page]


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """One browser profile without Web Locks: its tabs share `localStorage`."""
    opened = browser.new_context(viewport={"width": 1200, "height": 800})
    opened.add_init_script(NO_LOCKS)
    yield opened
    opened.close()


@pytest.fixture
def new_tab(context: BrowserContext, server: Serve, console: Console, user: str) -> NewTab:
    """``new_tab(tab_id=None)``: a tab signed in on the memory file; ``tab_id`` puts that id
    in its sessionStorage first, as duplicating a tab copies it."""

    def open_(tab_id: str | None = None) -> Page:
        page = context.new_page()
        console.watch(page)
        if tab_id is not None:
            page.add_init_script(f"sessionStorage.setItem('memstrata.tab', {tab_id!r});")
        page.goto(f"{server.url}/")
        assert page.evaluate("() => navigator.locks === undefined")
        sign_in(page, server.token(user))
        _memory(page)
        return page

    return open_


def _memory(page: Page) -> None:
    """Select MEMORY.md and wait for its first read to end: loaded, or its kept text offered.

    Not conftest's `tab`, which waits for the read that selecting a tab sends: selected
    while its first read is still waiting for the other tabs' answers, none is sent."""
    page.click("#tab-memory")
    expect(page.locator("#tab-memory")).to_have_attribute("aria-selected", "true")
    page.wait_for_function(
        "() => !document.querySelector('#editor').disabled"
        " || !document.querySelector('#draft-offer').hidden"
    )


def _not_offered(page: Page) -> None:
    _memory(page)
    expect(page.locator("#draft-offer")).to_be_hidden()


def _offered(page: Page) -> str:
    """The text a new tab offers back, restored into its editor."""
    _memory(page)
    expect(page.locator("#draft-offer")).to_be_visible()
    page.click("#draft-restore")
    expect(page.locator("#draft-offer")).to_be_hidden()
    return page.locator("#editor").input_value()


def test_an_open_tabs_text_is_not_offered_in_another_until_it_closes(new_tab: NewTab) -> None:
    a = new_tab()
    _typed(a, "\n- typed in tab A, still open")
    b = new_tab()
    _not_offered(b)  # A answers: its text stays A's
    assert "typed in tab A" not in b.locator("#editor").input_value()
    assert any("typed in tab A" in t for t in b.evaluate(DRAFT_TEXTS))
    a.close()  # closed (or crashed): now nobody answers for its text
    c = new_tab()
    assert "typed in tab A, still open" in _offered(c)


def test_a_duplicated_tab_takes_an_id_of_its_own(new_tab: NewTab) -> None:
    a = new_tab()
    _typed(a, "\n- the original tab's text")
    copied = a.evaluate(TAB_ID)
    d = new_tab(tab_id=copied)  # A's id, as a duplicated tab has: A answers with it
    _not_offered(d)
    assert d.evaluate(TAB_ID) != copied
    _typed(d, "\n- the duplicate's text")
    texts = a.evaluate(DRAFT_TEXTS)
    assert len(texts) == 2, texts  # neither wrote over the other's record
    assert any("the original tab's text" in t and "duplicate" not in t for t in texts)

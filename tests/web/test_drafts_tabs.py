"""Drafts kept across a reload with several tabs of one browser, signed in as the same user:
they share one `localStorage`, so each tab keeps its own record (a reload, a crash or a
closed tab loses none of them), a save in one tab removes only that tab's record, and Sign
out in one tab leaves the records of tabs still signed in."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.web.conftest import Console, answer_dialogs, append, sign_in, tab
from tests.web.server import Serve

DRAFT_TEXTS = (
    "() => Object.keys(localStorage).filter((k) => k.startsWith('memstrata.draft'))"
    ".map((k) => JSON.parse(localStorage.getItem(k)).text)"
)
NewTab = Callable[[], Page]


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """One browser profile: its tabs share `localStorage`, each has its own sessionStorage."""
    opened = browser.new_context(viewport={"width": 1200, "height": 800})
    yield opened
    opened.close()


@pytest.fixture
def new_tab(context: BrowserContext, server: Serve, console: Console, user: str) -> NewTab:
    def open_() -> Page:
        page = context.new_page()
        console.watch(page)
        page.goto(f"{server.url}/")
        sign_in(page, server.token(user))
        tab(page, "memory")
        return page

    return open_


def _typed(page: Page, text: str) -> None:
    append(page, text)
    page.wait_for_function(f"() => ({DRAFT_TEXTS})().some((t) => t.includes({text!r}))")


def _offered(page: Page) -> str:
    """The text a (re)opened tab offers back, restored into its editor."""
    expect(page.locator("#file-tabs [role=tab]")).to_have_count(3)
    tab(page, "memory")
    expect(page.locator("#draft-offer")).to_be_visible()
    page.click("#draft-restore")
    expect(page.locator("#draft-offer")).to_be_hidden()
    return page.locator("#editor").input_value()


def test_each_tab_gets_its_own_text_back_after_a_reload(new_tab: NewTab) -> None:
    a, b = new_tab(), new_tab()
    _typed(a, "\n- typed in tab A")
    _typed(b, "\n- typed in tab B")
    a.reload()
    text = _offered(a)
    assert "typed in tab A" in text and "typed in tab B" not in text
    b.reload()
    text = _offered(b)
    assert "typed in tab B" in text and "typed in tab A" not in text


def test_a_save_in_one_tab_keeps_a_closed_tabs_text(new_tab: NewTab) -> None:
    a, b = new_tab(), new_tab()
    _typed(a, "\n- only in tab A")
    _typed(b, "\n- saved from tab B")
    b.click("#file-save")
    expect(b.locator("#file-state")).to_have_text("Saved")
    a.close()  # a crash or a closed tab: its text is offered in the next one opened
    c = new_tab()
    text = _offered(c)
    assert "only in tab A" in text


def test_sign_out_in_one_tab_keeps_another_signed_in_tabs_text(new_tab: NewTab) -> None:
    a, c = new_tab(), new_tab()
    _typed(a, "\n- still signed in here")
    c.click("#signout")
    expect(c.locator("#signin-view")).to_be_visible()
    assert any("still signed in here" in t for t in c.evaluate(DRAFT_TEXTS))
    a.reload()
    assert "still signed in here" in _offered(a)
    answer_dialogs(a, [True])  # "Sign out and discard them?": now this tab's text goes too
    a.click("#signout")
    expect(a.locator("#signin-view")).to_be_visible()
    a.wait_for_function(f"() => ({DRAFT_TEXTS})().length === 0")

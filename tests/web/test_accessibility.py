"""Accessibility beyond the basics: the skip link, focus never under the sticky header,
the conflict diff for assistive tech, and right-to-left and CJK text."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Route, expect

from tests.web.conftest import (
    Console,
    OpenPage,
    SignedIn,
    append,
    sign_in,
    tab,
    write_elsewhere,
)
from tests.web.server import Serve


@pytest.mark.parametrize("view", ["skills", "search"])
def test_skip_to_content_stays_on_the_view_and_moves_the_focus_into_it(
    signed_in: SignedIn, view: str
) -> None:
    page = signed_in()
    page.click(f"#nav a[data-view={view}]")
    expect(page.locator(f"#{view}-view")).to_be_visible()
    page.focus("a.skip")
    page.keyboard.press("Enter")
    expect(page.locator("#main")).to_be_focused()
    expect(page.locator(f"#{view}-view")).to_be_visible()
    expect(page.locator("#files-view")).to_be_hidden()
    assert page.evaluate("location.hash") == f"#{view}"
    # the next Tab lands in the view's own content, not in the header
    page.keyboard.press("Tab")
    assert page.evaluate(f"document.getElementById('{view}-view').contains(document.activeElement)")


def test_an_unknown_hash_leaves_the_view_as_it_is(signed_in: SignedIn) -> None:
    page = signed_in()
    page.click("#nav a[data-view=search]")
    expect(page.locator("#search-view")).to_be_visible()
    page.evaluate("location.hash = '#main'")
    page.wait_for_function("location.hash === '#main'")
    page.wait_for_timeout(100)
    expect(page.locator("#search-view")).to_be_visible()
    expect(page.locator("#files-view")).to_be_hidden()


_FOCUSED_VS_HEADER = """() => {
  const focused = document.activeElement.getBoundingClientRect();
  const bar = document.querySelector("header.bar").getBoundingClientRect();
  return [document.activeElement.id, focused.top, bar.bottom];
}"""


# A phone (the header wraps to two rows) and a 1280 x 800 screen at 200 % zoom.
@pytest.mark.parametrize(("width", "height"), [(375, 740), (640, 400)])
def test_a_focused_control_is_never_under_the_sticky_header(
    signed_in: SignedIn, width: int, height: int
) -> None:
    page = signed_in(width=width, height=height)
    tab(page, "soul")
    append(page, "x")  # Revert and Save enabled: Tab goes editor → Revert → Save, and back
    moves = [("Tab", "file-revert"), ("Tab", "file-save"), ("Shift+Tab", "file-revert")]
    moves += [("Shift+Tab", "editor"), ("Shift+Tab", "tab-soul")]
    for key, expected in moves:
        page.keyboard.press(key)
        page.wait_for_timeout(50)  # (a smooth scroll would need longer; the page has none)
        focused, top, bar_bottom = page.evaluate(_FOCUSED_VS_HEADER)
        assert focused == expected
        assert top >= bar_bottom, f"{width}x{height}: #{focused} at {top}, header to {bar_bottom}"


def test_the_conflict_diff_is_a_table_with_headers_and_words_for_the_changes(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "user")
    page.fill("#editor", "one\ntwo\nthree\nfour")
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 2")
    write_elsewhere(server, user, "user", "WRITTEN ELSEWHERE")
    page.fill("#editor", "MINE\none\nINSERTED\ntwo\nthree")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    table = page.get_by_role("table", name="Line differences")
    headers = table.get_by_role("columnheader")
    expect(headers).to_have_text(["Saved by someone else · version 3", "Your text (not saved)"])
    # colour is not the only mark: each differing line says how it differs, and whose change
    # it is (test_conflict_overwrite.py)
    for name in (
        "changed by someone else: WRITTEN ELSEWHERE",
        "changed by you: MINE",
        "added by you: INSERTED",
        "removed by you: four",
    ):
        expect(table.get_by_role("cell", name=name, exact=True)).to_have_count(1)
    expect(table.get_by_role("cell", name="two", exact=True)).to_have_count(2)  # unchanged
    # the words are for assistive tech: copying the column copies the text only
    marks = page.locator("#conflict-diff .mark")
    expect(marks).to_have_count(4)
    assert marks.first.evaluate("e => getComputedStyle(e).userSelect") == "none"


_HEBREW = "שלום עולם, this is a note"
_ARABIC = "مرحبا بالعالم"
_CHINESE = "在网上搜索最新信息并总结结果 (web)"
_JAPANESE = "ウェブを検索して結果をまとめます"


def _skills(route: Route) -> None:
    skills = [
        {"name": "he", "category": "x", "description": _HEBREW, "enabled": True},
        {"name": "zh", "category": "x", "description": _CHINESE, "enabled": True},
        {"name": "ja", "category": "x", "description": _JAPANESE, "enabled": True},
        {"name": "en", "category": "x", "description": "Search the web, 网", "enabled": True},
    ]
    route.fulfill(content_type="application/json", body=json.dumps({"skills": skills}))


def _hits(route: Route) -> None:
    hit = {
        "source": "memory",
        "file_path": "USER.md",
        "created_at": "2026-01-01T00:00:00Z",
        "score": 0.5,
        "explain": {"resident": True},
    }
    texts = [_ARABIC + "\nsecond line", "English first\n" + _HEBREW, _CHINESE]
    body = {"mode": "bm25", "timings_ms": {}, "warnings": [], "hits": []}
    body["hits"] = [{**hit, "text": text} for text in texts]
    route.fulfill(content_type="application/json", body=json.dumps(body))


_DIRECTION = "e => getComputedStyle(e).direction"


def test_right_to_left_and_cjk_text_is_marked_for_the_browser(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    page.route("**/api/config/skills", _skills)
    page.route("**/api/memory/search", _hits)
    sign_in(page, server.token(user))
    # the editor: a Hebrew file reads right to left, each line in its own direction
    tab(page, "user")
    editor = page.locator("#editor")
    expect(editor).to_have_attribute("dir", "auto")
    page.fill("#editor", _HEBREW + "\nEnglish line")
    assert editor.evaluate(_DIRECTION) == "rtl"
    assert editor.evaluate("e => getComputedStyle(e).unicodeBidi") == "plaintext"
    expect(page.locator("#kept-text")).to_have_attribute("dir", "auto")

    page.click("#nav a[data-view=skills]")
    expect(page.locator(".skill")).to_have_count(4)
    desc = {name: page.locator(f"#skill-{name}-desc") for name in ("he", "zh", "ja", "en")}
    for name in desc:
        expect(desc[name]).to_have_attribute("dir", "auto")
    # expect() retries: a list rendered again meanwhile (a second load) detaches the
    # element a one-shot evaluate would read ('' from a detached node)
    expect(desc["he"]).to_have_css("direction", "rtl")
    expect(desc["en"]).to_have_css("direction", "ltr")
    # mostly Chinese / Japanese text gets its language (the page is lang="en"); one Han
    # character in an English sentence does not
    expect(desc["zh"]).to_have_attribute("lang", "zh")
    expect(desc["ja"]).to_have_attribute("lang", "ja")
    assert desc["en"].get_attribute("lang") is None

    page.click("#nav a[data-view=search]")
    page.fill("#query", "anything")
    page.press("#query", "Enter")
    hits = page.locator(".hit-text")
    expect(hits).to_have_count(3)
    for i in range(3):
        expect(hits.nth(i)).to_have_attribute("dir", "auto")
    for i, direction in enumerate(("rtl", "ltr", "ltr")):
        expect(hits.nth(i)).to_have_css("direction", direction)
    expect(hits.nth(2)).to_have_attribute("lang", "zh")
    assert hits.nth(0).get_attribute("lang") is None

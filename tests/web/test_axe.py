"""A rule-based WCAG audit of every view and state of the page with axe-core, Deque's
engine, run inside the page at a desktop and a phone width, in the light and the dark
colour scheme. axe-core comes in the ``axe-playwright-python`` wheel (``axe.min.js``):
nothing is fetched at test time.

Every rule axe-core runs by default must pass, with no exception: WCAG 2.0-2.2 A and AA
(contrast, names and labels, ARIA use, keyboard access to scrolling regions, ...) and its
best practices (landmarks, heading order, ...). A rule engine cannot see where focus goes,
what the diff says to a screen reader or which way text runs: ``test_accessibility.py``
checks those by hand.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from axe_playwright_python.base import AXE_SCRIPT
from playwright.sync_api import Page, expect

from memstrata.sandbox.state import CONFLICT_DIR
from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    Console,
    OpenPage,
    SignedIn,
    append,
    put_elsewhere,
    shot,
    tab,
)
from tests.web.kept_aside import real_conflict, sandbox
from tests.web.server import Serve
from tests.web.test_conflict_limits import _HOLD_ONE_PUT, paste

# A desktop screen, and a phone below both of the page's breakpoints (720 and 480 px).
VIEWPORTS = [pytest.param((1280, 800), id="desktop"), pytest.param((390, 800), id="phone")]
CHINESE = "# 关于用户\n- 名字：李明\n- 住在上海，喜欢喝乌龙茶\n- 工作：软件工程师\n"
# Only the violations come back in full (passes and the rest are not needed here).
_RUN = "() => axe.run(document, {resultTypes: ['violations']})"


def _describe(violation: dict[str, Any]) -> str:
    """One line per violated rule: its id, impact, what it asks and where it failed."""
    nodes = violation["nodes"]
    where = "; ".join(
        f"{' '.join(node['target'])}: {node['failureSummary'].splitlines()[-1].strip()}"
        for node in nodes[:3]
    )
    more = f" (and {len(nodes) - 3} more)" if len(nodes) > 3 else ""
    return f"{violation['id']} ({violation['impact']}): {violation['help']} — {where}{more}"


class Audit:
    """axe-core's violations in each state a test brings its page to, reported together at
    the end (one run shows every state that fails, not only the first)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.found: list[str] = []

    def __call__(self, state: str) -> None:
        """Audit the page as it is now, in the light and the dark colour scheme."""
        page = self.page
        width = (page.viewport_size or {"width": 0})["width"]
        shot(page, f"axe-{re.sub(r'[^a-z0-9]+', '-', state.lower())}-{width}.png")
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
            # a reload drops the engine with the document: inject it again
            if not page.evaluate("typeof window.axe === 'object'"):
                page.evaluate(AXE_SCRIPT)
            violations = page.evaluate(_RUN)["violations"]
            self.found += [f"[{state}, {width} px, {scheme}] {_describe(v)}" for v in violations]
        page.emulate_media(color_scheme="light")

    def assert_clean(self) -> None:
        assert not self.found, "axe-core violations:\n" + "\n".join(self.found)


def test_the_audit_reports_a_violation(open_page: OpenPage) -> None:
    """The audit can fail: a field without a label and grey-on-grey text are caught."""
    page = open_page()
    expect(page.locator("#token")).to_be_visible()
    page.evaluate(
        """() => document.querySelector("#signin-form").append(
             Object.assign(document.createElement("input"), {type: "text"}),
             Object.assign(document.createElement("p"), {
               textContent: "faint", style: "color: #bbb; background: #ccc"}))"""
    )
    audit = Audit(page)
    audit("broken on purpose")
    rules = {re.sub(r"^\[[^]]*\] (\S+) .*", r"\1", line) for line in audit.found}
    assert rules == {"label", "color-contrast"}, audit.found


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_sign_in(
    open_page: OpenPage, server: Serve, console: Console, viewport: tuple[int, int]
) -> None:
    console.allow(401)
    page = open_page(*viewport)
    expect(page.locator("#token")).to_be_visible()
    audit = Audit(page)
    audit("sign-in")
    page.fill("#token", server.token("nobody", ttl_s=-60))  # expired: refused
    page.press("#token", "Enter")
    expect(page.locator("#signin-error")).to_contain_text("This sign-in token has expired")
    audit("sign-in refused")
    audit.assert_clean()


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_files(
    signed_in: SignedIn, server: Serve, console: Console, user: str, viewport: tuple[int, int]
) -> None:
    long_file = "".join(f"- fact {i}: something the agent remembers\n" for i in range(400))
    put_elsewhere(server, user, "memory", long_file)
    put_elsewhere(server, user, "user", CHINESE)
    page = signed_in(*viewport)
    audit = Audit(page)
    audit("files")
    tab(page, "memory")
    expect(page.locator("#editor")).to_have_value(long_file)
    audit("a long file")
    tab(page, "user")
    expect(page.locator("#editor")).to_have_value(CHINESE)
    append(page, "- 新的一行")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    audit("Chinese text, unsaved")
    console.allow(422)
    refused = {"code": "invalid", "detail": "content holds a NUL character", "errors": []}
    page.route(
        "**/api/config/agent-files/user",
        lambda route: (
            route.fulfill(status=422, content_type="application/json", body=json.dumps(refused))
            if route.request.method == "PUT"
            else route.continue_()
        ),
    )
    page.click("#file-save")
    expect(page.locator("#file-message")).to_contain_text("The server refused this text")
    audit("save error")
    console.allow(503)
    page.route(
        "**/api/config/agent-files/soul",
        lambda route: route.fulfill(status=503, content_type="application/json", body="{}"),
    )
    page.reload()  # signed in again from the tab's storage; SOUL.md fails to load
    expect(page.locator("#file-retry")).to_be_visible()
    audit("load error")
    tab(page, "user")  # its unsaved text, kept across the reload, is offered back
    expect(page.locator("#draft-offer")).to_be_visible()
    audit("a draft offered back")
    audit.assert_clean()


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_conflicts(
    signed_in: SignedIn, server: Serve, console: Console, user: str, viewport: tuple[int, int]
) -> None:
    console.allow(409)
    page = signed_in(*viewport)
    audit = Audit(page)
    tab(page, "user")
    append(page, "\n- typed here")
    put_elsewhere(server, user, "user", "# USER\n- written elsewhere\n")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    audit("conflict")
    page.click("#conflict-reapply")
    expect(page.locator("#kept")).to_be_visible()
    audit("re-applied, earlier text aside")
    # both edits rewrite the whole of SOUL.md: one place to choose at
    tab(page, "soul")
    page.fill("#editor", "- my persona")
    put_elsewhere(server, user, "soul", "- their persona\n")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    page.click("#conflict-reapply")
    place = page.locator("#resolve-list > li").first
    place.get_by_label("Write it myself").check()
    expect(place.locator("textarea")).to_be_visible()
    audit("places to choose")
    # the user's text grows over the size limit while the save is out
    tab(page, "memory")
    put_elsewhere(server, user, "memory", "- written elsewhere\n")
    page.evaluate(_HOLD_ONE_PUT)
    append(page, "\n- typed")
    page.click("#file-save")
    page.wait_for_function("window.__release !== null")
    paste(page, "x" * (MAX_CONTENT_BYTES + 10))
    page.evaluate("window.__release()")
    expect(page.locator("#conflict-limit")).to_be_visible()
    expect(page.locator("#conflict-shorten")).to_be_visible()
    audit("conflict over the size limit")
    audit.assert_clean()
    # what was audited had a diff longer than its box, which a keyboard must reach to scroll
    assert page.locator("#conflict-table").evaluate("t => t.scrollHeight > t.clientHeight")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_kept_aside_agent_edits(
    signed_in: SignedIn, server: Serve, user: str, viewport: tuple[int, int]
) -> None:
    real_conflict(server, user)
    for day in range(1, 7):  # older ones, beyond the first five shown
        name = f"MEMORY.md.202501{day:02d}T120000.000000Z.rejected.md"
        (sandbox(server, user) / CONFLICT_DIR / name).write_text(f"copy {day}\n")
    page = signed_in(*viewport)
    audit = Audit(page)
    tab(page, "memory")
    notices = page.locator("#aside .aside-item")
    expect(notices).to_have_count(5)
    expect(page.locator("#aside-more")).to_be_visible()
    audit("kept-aside edits")
    notices.first.get_by_role("button", name=re.compile("^View")).click()
    expect(notices.first.locator(".aside-text")).to_be_visible()
    audit("a kept-aside edit viewed")
    audit.assert_clean()


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_skills(signed_in: SignedIn, console: Console, viewport: tuple[int, int]) -> None:
    page = signed_in(*viewport)
    audit = Audit(page)
    page.click("#nav a[data-view=skills]")
    expect(page.locator(".skill").first).to_be_visible()
    # the built-in skills' English descriptions on this English page
    expect(page.locator(".skill-desc[lang=en]").first).to_be_visible()
    audit("skills")
    # and their own, Chinese, on a page in Chinese (read again on opening the view)
    page.evaluate("document.documentElement.lang = 'zh-CN'")
    page.click("#nav a[data-view=files]")
    page.click("#nav a[data-view=skills]")
    expect(page.locator(".skill-desc[lang=zh]").first).to_be_visible()
    audit("skills described in Chinese")
    page.evaluate("document.documentElement.lang = 'en'")
    console.allow(503)
    page.route(
        "**/api/config/skills/*",
        lambda route: route.fulfill(status=503, content_type="application/json", body="{}"),
    )
    page.locator(".switch").first.click()
    expect(page.locator(".skill-error").first).to_be_visible()
    audit("a switch that failed")
    audit.assert_clean()


def _search(page: Page, query: str) -> None:
    page.fill("#query", query)
    page.press("#query", "Enter")
    expect(page.locator("#hits")).to_have_attribute("aria-busy", "false")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_search(signed_in: SignedIn, server: Serve, user: str, viewport: tuple[int, int]) -> None:
    put_elsewhere(server, user, "user", "# USER\n- Adopted a puppy named Biscuit.\n")
    story = " ".join(f"On day {day} Biscuit chewed another shoe." for day in range(40))  # one chunk
    with server.rest(user) as rest:
        turn = {"turn_index": 3, "user_message": story, "assistant_reply": "Oh no!"}
        rest.post("/api/memory/conversations/trip/turns", json=turn).raise_for_status()
    page = signed_in(*viewport)
    audit = Audit(page)
    page.click("#nav a[data-view=search]")
    expect(page.locator("#query")).to_be_visible()
    audit("search")
    _search(page, "Biscuit")
    hits = page.locator(".hit")
    expect(hits).to_have_count(2)
    long_text, short_text = (
        hits.filter(has_text=t).locator(".hit-text") for t in ("chewed", "Adopted")
    )
    assert long_text.evaluate("p => p.scrollHeight > p.clientHeight")  # it scrolls in its box
    audit("search with hits")
    _search(page, "zebra")
    expect(page.locator("#hits .empty")).to_be_visible()
    audit("search with no hits")
    _search(page, "")
    expect(page.locator("#search-message")).to_have_text("Type something to search for.")
    audit("search refused")
    audit.assert_clean()
    # the long hit's text is a tab stop because it scrolls, the short one is not
    _search(page, "Biscuit")
    expect(long_text).to_have_attribute("tabindex", "0")
    expect(short_text).not_to_have_attribute("tabindex", re.compile(".*"))

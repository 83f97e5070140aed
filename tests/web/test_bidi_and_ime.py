"""Text from the data inside the page's own words (session ids, paths, user ids, skill names)
cannot reorder them; text fields take the direction of their text; Ctrl+S leaves an input
method's unfinished text alone.

The ids come through ``page.route``, not the API: the API may refuse bidi control characters
in new ids, but ids stored before (and other fields) must still be shown safely.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, Route, expect

from tests.api.auth import token_of
from tests.web.conftest import (
    Console,
    OpenPage,
    SignedIn,
    answer_dialogs,
    append,
    sign_in,
    stored_file,
    tab,
)
from tests.web.server import Serve

# WEB_TEST_SHOTS=<dir>: save what these tests check to look at (nothing is saved without it)
SHOTS = os.environ.get("WEB_TEST_SHOTS")
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: what follows is drawn reversed
PDI = "\u2069"  # POP DIRECTIONAL ISOLATE: would end an isolation (a <bdi>) early
HEBREW = "שלום 12"


def _shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


# The boxes the browser drew for consecutive pieces of an element's text (together the
# pieces are its textContent): for each piece, [left, top, right, bottom] of each box.
_BOXES = """(root, pieces) => {
  const nodes = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
  const point = (offset, end) => {
    for (const node of nodes) {
      if (offset < node.data.length || (end && offset === node.data.length)) return [node, offset];
      offset -= node.data.length;
    }
    throw new Error("the pieces are longer than the text");
  };
  let at = 0;
  return pieces.map((piece) => {
    const range = document.createRange();
    range.setStart(...point(at, false));
    range.setEnd(...point(at + piece.length, true));
    at += piece.length;
    return [...range.getClientRects()].filter((r) => r.width > 0)
      .map((r) => [r.left, r.top, r.right, r.bottom]);
  });
}"""


def assert_drawn_in_order(element: Locator, pieces: list[str], data: int) -> None:
    """``pieces[data]`` (text from the data) sits among the page's own words: the piece
    before it ends to its left and the piece after it starts to its right, on its line (the
    page is left to right), whatever letters or bidi control characters it holds."""
    expect(element).to_have_text("".join(pieces))
    boxes: list[list[list[float]]] = element.evaluate(_BOXES, pieces)
    left = min(box[0] for box in boxes[data])
    top = min(box[1] for box in boxes[data])
    right = max(box[2] for box in boxes[data])
    bottom = max(box[3] for box in boxes[data])
    shown = repr("".join(pieces))

    def on_its_line(piece: int) -> list[list[float]]:
        return [box for box in boxes[piece] if box[1] < bottom and box[3] > top]

    if data > 0:
        before = on_its_line(data - 1)
        assert before, f"{shown}: {pieces[data - 1]!r} is not on the line of {pieces[data]!r}"
        assert max(box[2] for box in before) <= left + 0.5, f"{shown}: {boxes}"
    if data + 1 < len(pieces):
        after = on_its_line(data + 1)
        assert after, f"{shown}: {pieces[data + 1]!r} is not on the line of {pieces[data]!r}"
        assert min(box[0] for box in after) >= right - 0.5, f"{shown}: {boxes}"


_ISOLATION = """e => ({
  tag: e.tagName, dir: e.getAttribute("dir"), direction: getComputedStyle(e).direction,
  unicodeBidi: getComputedStyle(e).unicodeBidi, display: getComputedStyle(e).display,
})"""


def assert_isolated(element: Locator, text: str, direction: str = "ltr") -> None:
    """``element`` holds only ``text`` and isolates it: a <bdi> (or ``dir="auto"``) takes
    the direction of its own first letter, and an inline-block's text is a bidi paragraph of
    its own, which a PDI inside cannot end early."""
    expect(element).to_have_text(text)
    got: dict[str, Any] = element.evaluate(_ISOLATION)
    assert got["tag"] == "BDI" or got["dir"] == "auto", got
    assert got["unicodeBidi"] == "isolate", got
    assert got["display"] == "inline-block", got
    assert got["direction"] == direction, got


# (source, file_path, the origin shown in pieces, which piece is from the data)
_ORIGINS = [
    ("conversation", f"sessions/{RLO}abc/7", ["session ", f"{RLO}abc", " · turn 7"], 1),
    ("conversation", f"sessions/{PDI}{RLO}abc/8", ["session ", f"{PDI}{RLO}abc", " · turn 8"], 1),
    ("conversation", f"sessions/{HEBREW}/9", ["session ", HEBREW, " · turn 9"], 1),
    ("conversation", f"imported/{RLO}old", ["conversation ", f"imported/{RLO}old"], 1),
    ("notes", f"notes/{PDI}{RLO}2026.md", ["notes ", f"notes/{PDI}{RLO}2026.md"], 1),
    ("memory", "USER.md", ["file ", "USER.md"], 1),
]


def _hits(route: Route) -> None:
    hits = [
        {
            "source": source,
            "file_path": path,
            "text": f"hit {index}",
            "created_at": "2026-01-01T00:00:00Z",
            "score": 0.5,
            "explain": {"bm25_rank": 1, "vector_rank": None, "rrf_score": 0.01},
        }
        for index, (source, path, _, _) in enumerate(_ORIGINS)
    ]
    body = {"mode": "bm25", "timings_ms": {}, "warnings": [], "hits": hits}
    route.fulfill(content_type="application/json", body=json.dumps(body))


def test_session_ids_and_paths_cannot_reorder_a_hits_origin(signed_in: SignedIn) -> None:
    page = signed_in()
    page.route("**/api/memory/search", _hits)
    page.click("#nav a[data-view=search]")
    page.fill("#query", "anything")
    page.press("#query", "Enter")
    origins = page.locator(".hit .origin")
    expect(origins).to_have_count(len(_ORIGINS))
    _shot(page, "search-origins.png")
    for index, (_, _, pieces, data) in enumerate(_ORIGINS):
        assert_drawn_in_order(origins.nth(index), pieces, data)
    for index, (_, _, pieces, data) in enumerate(_ORIGINS):
        direction = "rtl" if pieces[data] == HEBREW else "ltr"
        assert_isolated(origins.nth(index).locator("bdi, [dir=auto]"), pieces[data], direction)


def test_every_text_field_takes_the_direction_of_its_text(signed_in: SignedIn) -> None:
    page = signed_in()
    page.click("#nav a[data-view=search]")
    query = page.locator("#query")
    page.fill("#query", "מה אני אוהב לאכול")
    _shot(page, "search-hebrew-query.png")
    assert query.evaluate("e => getComputedStyle(e).direction") == "rtl"
    fields = page.locator("textarea, input:not([type]), input[type=text], input[type=search]")
    expect(fields).to_have_count(3)  # the editor, the set-aside text, the search box
    for field in fields.all():
        expect(field).to_have_attribute("dir", "auto")
    page.fill("#query", "what do I like to eat")
    assert query.evaluate("e => getComputedStyle(e).direction") == "ltr"


def test_user_ids_cannot_reorder_the_sign_in_messages(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(401)
    other = f"{user}-other"
    shown = f"{PDI}{RLO}eve"  # the user id the server names for the other token
    other_token = server.token(other)  # once: a token minted a second later differs

    def limits(route: Route) -> None:
        if other_token not in (route.request.headers.get("authorization") or ""):
            route.continue_()
            return
        body = route.fetch().json()
        route.fulfill(content_type="application/json", body=json.dumps(body | {"user_id": shown}))

    page = open_page()
    page.route("**/api/config/limits", limits)
    sign_in(page, server.token(user))
    # a draft, then the token is refused on save: back at sign-in, the draft kept
    forged = token_of(user, "y" * 40)
    page.evaluate("t => sessionStorage.setItem('memstrata.token', t)", forged)
    append(page, "\nDRAFT")
    page.click("#file-save")
    expect(page.locator("#signin-error")).to_contain_text("You were signed out:")
    asked = answer_dialogs(page, [False, True])
    page.fill("#token", other_token)
    page.press("#token", "Enter")
    message = page.locator("#signin-error")
    pieces = [
        "Not signed in: that token is for ",
        shown,
        ". The unsaved changes of ",
        user,
        " are still here; sign in as ",
        user,
        " to save them.",
    ]
    expect(message).to_have_text("".join(pieces))
    _shot(page, "signin-user-ids.png")
    assert_drawn_in_order(message, pieces, 1)
    ids = message.locator("bdi")
    expect(ids).to_have_count(3)
    for index, text in enumerate((shown, user, user)):
        assert_isolated(ids.nth(index), text)
    # a dialog is plain text: first-strong isolates (U+2068 … U+2069) around each id, the
    # PDI that would end one early dropped
    assert asked == [
        f"This page holds unsaved changes of \u2068{user}\u2069. Sign in as \u2068{RLO}eve\u2069 "
        "and discard them?"
    ]
    # signed in as the other user: the header shows the id in a direction of its own
    page.fill("#token", other_token)
    page.press("#token", "Enter")
    who = page.locator("#who")
    expect(who).to_have_text(shown)
    expect(who).to_have_attribute("dir", "auto")
    title = re.compile(f"^signed in as \u2068{RLO}eve\u2069; token expires ")
    expect(who).to_have_attribute("title", title)
    assert len(asked) == 2


def test_skill_names_cannot_reorder_the_skill_or_its_error(
    signed_in: SignedIn, console: Console
) -> None:
    console.allow(503)
    skills: list[dict[str, Any]] = [
        {"name": f"{PDI}{RLO}web", "category": "tools", "description": "d", "enabled": True},
        {"name": HEBREW, "category": "כלים", "description": "d", "enabled": True},
    ]
    page = signed_in()
    page.route(
        "**/api/config/skills",
        lambda route: route.fulfill(
            content_type="application/json", body=json.dumps({"skills": skills})
        ),
    )
    page.route(
        "**/api/config/skills/*",
        lambda route: route.fulfill(
            status=503, content_type="application/json", body='{"detail": "unavailable"}'
        ),
    )
    page.click("#nav a[data-view=skills]")
    items = page.locator(".skill")
    expect(items).to_have_count(2)
    items.nth(0).locator("[role=switch]").click()
    error = items.nth(0).locator(".skill-error")
    pieces = ["Could not turn ", f"{PDI}{RLO}web", " off. Unavailable. It is on again."]
    expect(error).to_have_text("".join(pieces))
    _shot(page, "skills-names.png")
    assert_drawn_in_order(error, pieces, 1)
    for index, direction in enumerate(("ltr", "rtl")):
        item = items.nth(index)
        name, badge = item.locator(".skill-name"), item.locator(".badge")
        # the category is drawn after the name, to its right
        name_box, badge_box = name.bounding_box(), badge.bounding_box()
        assert name_box and badge_box
        assert badge_box["x"] >= name_box["x"] + name_box["width"], (name_box, badge_box)
        assert_isolated(name, skills[index]["name"], direction)
        expect(badge).to_have_attribute("dir", "auto")
    assert_isolated(error.locator("bdi").first, pieces[1])  # the second: the server's words


# What reached the page's keydown listeners (the page's own listener is on `document`).
_RECORD_KEYS = """() => {
  window.keys = [];
  window.addEventListener("keydown", (e) => window.keys.push(
    {key: e.key, keyCode: e.keyCode, ctrl: e.ctrlKey, composing: e.isComposing}), true);
}"""


@pytest.mark.parametrize("ime", ["composing", "keyCode 229"])
def test_ctrl_s_leaves_an_input_methods_unfinished_text_alone(
    signed_in: SignedIn, server: Serve, user: str, ime: str
) -> None:
    page = signed_in()
    tab(page, "user")
    puts: list[str] = []
    page.on(
        "request", lambda request: puts.append(request.url) if request.method == "PUT" else None
    )
    page.evaluate(_RECORD_KEYS)
    page.locator("#editor").press("Control+End")
    cdp = page.context.new_cdp_session(page)
    if ime == "composing":
        # a real composition (Chromium's IME interface): the preedit is in the editor, and a
        # key pressed meanwhile is a keydown with isComposing
        cdp.send(
            "Input.imeSetComposition", {"text": "らーめｎ", "selectionStart": 4, "selectionEnd": 4}
        )
        expect(page.locator("#file-state")).to_have_text("Unsaved changes")
        page.keyboard.press("Control+s")
        expected = {"key": "s", "keyCode": 83, "ctrl": True, "composing": True}
    else:
        # a key the input method handled: keyCode 229, isComposing false (Safari's keydown
        # that commits a composition)
        page.keyboard.insert_text("ラーメン")
        expect(page.locator("#file-state")).to_have_text("Unsaved changes")
        cdp.send(
            "Input.dispatchKeyEvent",
            {
                "type": "rawKeyDown",
                "modifiers": 2,  # Ctrl
                "key": "s",
                "code": "KeyS",
                "windowsVirtualKeyCode": 229,
            },
        )
        cdp.send("Input.dispatchKeyEvent", {"type": "keyUp", "modifiers": 2, "key": "s"})
        expected = {"key": "s", "keyCode": 229, "ctrl": True, "composing": False}
    page.wait_for_function("window.keys.some((k) => k.key === 's')")
    assert [k for k in page.evaluate("window.keys") if k["key"] == "s"] == [expected]
    page.wait_for_timeout(500)
    assert puts == [], "Ctrl+S saved the input method's unfinished text"
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert stored_file(server, user, "user")["version"] == 1
    if ime == "composing":
        cdp.send("Input.insertText", {"text": "ラーメン"})  # the composition is committed
    page.keyboard.press("Control+s")  # the shortcut saves the finished text
    expect(page.locator("#file-version")).to_have_text("version 2")
    assert stored_file(server, user, "user")["content"].endswith("ラーメン")

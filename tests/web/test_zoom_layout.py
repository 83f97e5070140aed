"""At 200 % zoom (a 1280 x 800 screen is 640 x 400 CSS pixels) the editor is taller than the
screen: typing scrolls the page, and the file tabs and the file bar (version, size, state,
Save) must stay in sight, not slide under the sticky header."""

from __future__ import annotations

from playwright.sync_api import Page

from tests.web.conftest import SignedIn, shot, tab

_BOXES = """() => {
  const box = (selector) => document.querySelector(selector).getBoundingClientRect();
  return {
    scrolled: window.scrollY, bar: box("header.bar").bottom, tabs: box("#file-tabs").top,
    filebar: box(".filebar").top, filebarBottom: box(".filebar").bottom,
    state: box("#file-state").top, height: window.innerHeight,
  };
}"""


def _type_at_the_end(page: Page, lines: int) -> None:
    editor = page.locator("#editor")
    editor.click()
    editor.press("Control+End")
    for n in range(lines):
        editor.press_sequentially(f"\nline {n}")


def test_typing_at_200_percent_zoom_keeps_the_tabs_and_the_file_bar_in_sight(
    signed_in: SignedIn,
) -> None:
    page = signed_in(width=640, height=400)
    tab(page, "user")
    _type_at_the_end(page, 25)
    shot(page, "zoom-200-typing.png")
    at = page.evaluate(_BOXES)
    assert at["scrolled"] > 0, at  # typing did scroll the page: what this test is about
    assert at["tabs"] >= at["bar"] - 1, at
    assert at["filebar"] >= at["bar"] - 1 and at["state"] >= at["bar"] - 1, at
    assert at["filebarBottom"] <= at["height"], at
    # the caret's line, at the end of the text, is on screen below the stuck bars
    editor = page.evaluate(
        """() => {
          const e = document.getElementById("editor");
          const { bottom } = e.getBoundingClientRect();
          return { bottom, unseen: e.scrollHeight - e.scrollTop - e.clientHeight };
        }"""
    )
    assert at["filebarBottom"] + 40 < editor["bottom"] <= at["height"] + 2, (at, editor)
    assert editor["unseen"] <= 12, editor  # the textarea's own padding at most


def test_every_file_tab_is_whole_in_sight_on_a_phone(signed_in: SignedIn) -> None:
    """At 360 px the tab row used to scroll sideways with the selected MEMORY.md, leaving
    SOUL.md cut in half at the edge and nothing to say there was more."""
    page = signed_in(width=360, height=740)
    tab(page, "memory")
    page.locator("#tab-memory").focus()
    shot(page, "phone-tabs.png")
    row = page.evaluate(
        """() => {
          const tabs = document.getElementById("file-tabs");
          const r = tabs.getBoundingClientRect();
          return {
            scrolls: tabs.scrollWidth > tabs.clientWidth, left: r.left, right: r.right,
            each: [...tabs.querySelectorAll("[role=tab]")].map((t) => {
              const b = t.getBoundingClientRect();
              return [t.textContent, b.left, b.right];
            }),
          };
        }"""
    )
    assert not row["scrolls"], row
    assert all(
        row["left"] - 0.5 <= left and right <= row["right"] + 0.5 for _, left, right in row["each"]
    ), row

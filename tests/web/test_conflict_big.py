"""A conflict in a 200 KB memory file: the diff folds the unchanged lines, counts the changes
and steps through them (Previous/Next, by keyboard too), and when the server's merge gives
up, the page shows the place where the two edits meet (the server's, exactly) to choose at,
rather than every row of two 200 KB texts (an end user's drill: a table 59,000 px tall), and
the result in the editor at that place."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.web.conftest import (
    Console,
    OpenPage,
    answer_dialogs,
    put_elsewhere,
    shot,
    sign_in,
    tab,
)
from tests.web.server import Serve

LINES = 3300  # ~220 KB: under the server's default limit (256 KiB)
THEIRS = [100 + k * 640 for k in range(5)]  # line indices the other writer changes
MINE = [420 + k * 640 for k in range(5)]  # and the user


def _big() -> list[str]:
    return [
        f"- fact {i}: the user mentioned something worth keeping, number {i}" for i in range(LINES)
    ]


@pytest.fixture(scope="module")
def big_server(
    chromium: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Serve]:
    """The server at its default size limit: a 200 KB file fits."""
    serve = Serve(tmp_path_factory.mktemp("web-big"), {"MEMSTRATA_DATABASE_URL": pg_url})
    serve.start()
    yield serve
    serve.stop()


def _conflict(
    open_page: OpenPage, big_server: Serve, user: str, theirs: list[str], mine: list[str]
) -> Page:
    """MEMORY.md holding the big text in the page; another writer saves ``theirs``; the
    user saves ``mine``: the conflict view."""
    put_elsewhere(big_server, user, "memory", "\n".join(_big()))
    page = open_page(on=big_server)
    sign_in(page, big_server.token(user))
    tab(page, "memory")
    put_elsewhere(big_server, user, "memory", "\n".join(theirs))
    # one input event, as a paste sends (typing 200 KB would take minutes)
    page.locator("#editor").evaluate(
        "(e, t) => { e.value = t; e.dispatchEvent(new Event('input', {bubbles: true})); }",
        "\n".join(mine),
    )
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    return page


def test_a_big_conflict_folds_unchanged_lines_and_steps_through_the_changes(
    open_page: OpenPage, big_server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    theirs, mine = _big(), _big()
    for i in THEIRS:
        theirs[i] = f"- THEIR change at {i}"
    for i in MINE:
        mine[i] = f"- MY change at {i}"
    page = _conflict(open_page, big_server, user, theirs, mine)
    expect(page.locator("#conflict-count")).to_have_text(
        "10 changes: 5 by someone else, 5 by you. Unchanged lines are folded."
    )
    rows = page.locator("#conflict-diff > [role=row]")
    # each change with 3 lines either side, and a fold between: 10 × 7 rows + 11 folds
    expect(rows).to_have_count(10 * 7 + 11)
    table = page.locator("#conflict-table")
    assert table.evaluate("t => t.scrollHeight") < 4000
    folds = page.locator("#conflict-diff .fold-open")
    expect(folds.first).to_have_text("Show 97 unchanged lines (lines 1–97 of version 3)")
    expect(folds.last).to_have_text("Show 316 unchanged lines (lines 2,985–3,300 of version 3)")
    at = page.locator("#conflict-at")
    expect(at).to_have_text(
        "Change 1 of 10, by someone else: line 101 of version 3, line 101 of your text."
    )
    shot(page, "conflict-big.png")

    # by keyboard: Tab from Previous reaches Next; Enter moves on and scrolls to it
    page.locator("#conflict-prev").focus()
    page.keyboard.press("Tab")
    expect(page.locator("#conflict-next")).to_be_focused()
    for _ in range(9):
        page.keyboard.press("Enter")
    expect(at).to_have_text(
        "Change 10 of 10, by you: line 2,981 of version 3, line 2,981 of your text."
    )
    current = page.locator("#conflict-diff .row.current")
    expect(current).to_have_count(1)
    expect(current.locator("[data-side=mine]")).to_have_text(
        "2981+changed by you: - MY change at 2980"
    )
    top, bottom = table.evaluate(
        "t => [t.getBoundingClientRect().top, t.getBoundingClientRect().bottom]"
    )
    box = current.bounding_box()
    assert box is not None and top <= box["y"] and box["y"] + box["height"] <= bottom
    page.keyboard.press("Enter")  # past the last: back to the first
    expect(at).to_contain_text("Change 1 of 10,")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")  # Previous, from the first: the last
    expect(at).to_contain_text("Change 10 of 10,")
    shot(page, "conflict-big-last.png")

    # a fold opens where it is: its lines, numbered, and the table keeps the focus
    folds.first.click()
    expect(rows).to_have_count(10 * 7 + 10 + 97)
    expect(page.locator("[data-side=stored]").filter(has_text="- fact 50:")).to_have_text(
        "51- fact 50: the user mentioned something worth keeping, number 50"
    )
    expect(table).to_be_focused()


def test_where_overlapping_edits_meet_is_said_and_shown(
    open_page: OpenPage, big_server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    theirs, mine = _big(), _big()
    theirs[1500] = "- fact 1500: THEIR words"
    mine[1500] = "- fact 1500: MY words"
    mine[1501] = "- fact 1501: MY words too"
    mine[200] = "- fact 200: an edit of mine elsewhere"
    page = _conflict(open_page, big_server, user, theirs, mine)
    page.click("#conflict-reapply")
    # the server's place, exactly: line 1,502 is in it, unchanged by them but next to their edit
    expect(page.locator("#file-message")).to_have_text(
        "Your edits and version 3 change the same or neighbouring lines, so they were not "
        "re-applied automatically: lines 1,501–1,502 of version 3 (lines 1,501–1,502 of your "
        "text). Choose what to keep there below; the rest of your edits were re-applied."
    )
    place = page.locator("#resolve-list > li")
    expect(place).to_have_count(1)  # one place, not two 200 KB texts
    expect(place.locator("h3")).to_have_text(
        "Place 1 of 1: lines 1,501–1,502 of version 3, lines 1,501–1,502 of your text"
    )
    expect(place.locator(".place-mine .place-line")).to_have_text(
        ["- fact 1500: MY words", "- fact 1501: MY words too"]
    )
    shot(page, "conflict-big-place.png")
    place.get_by_label("Keep both, version 3's first").check()
    page.click("#resolve-apply")
    both = [
        "- fact 1500: THEIR words",
        "- fact 1501: the user mentioned something worth keeping, number 1501",
        "- fact 1500: MY words",
        "- fact 1501: MY words too",
    ]
    merged = [*theirs[:200], mine[200], *theirs[201:1500], *both, *theirs[1502:]]
    editor = page.locator("#editor")
    expect(editor).to_have_value("\n".join(merged))
    expect(editor).to_be_focused()
    # the place selected in the editor, and scrolled to, a third down the box
    selected = editor.evaluate("e => e.value.slice(e.selectionStart, e.selectionEnd)")
    assert selected == "\n".join(both)
    # The lines are alike in length (they wrap alike), so where a line is is its share of
    # the text's height.
    top, height, seen = editor.evaluate("b => [b.scrollTop, b.scrollHeight, b.clientHeight]")
    assert top > 0
    assert abs(top + seen / 3 - height * 1500 / len(merged)) < seen / 3, (top, height, seen)
    shot(page, "conflict-big-overlap.png")


def test_versions_too_different_to_compare_say_so_and_keep_the_choices(
    open_page: OpenPage, big_server: Serve, console: Console, user: str
) -> None:
    """Past the diff's edit limit the page says so, rather than one "change" of every line
    with identical lines struck through as removed (an end user's drill)."""
    console.allow(409)
    theirs, mine = _big(), _big()
    for i in range(1, LINES, 2):
        theirs[i] = f"- fact {i}: reworded by the agent"
    mine[0] = "- fact 0: my edit"
    started = time.monotonic()
    page = _conflict(open_page, big_server, user, theirs, mine)
    expect(page.locator("#conflict-count")).to_have_text(
        "The two versions differ in too many lines to compare line by line here. Choose below "
        "what to do with your text: re-apply your edits, overwrite, or copy your text."
    )
    shown = time.monotonic() - started
    # no row says that a line both sides hold was removed
    same_but_marked = page.locator("#conflict-diff .row").evaluate_all(
        "rows => rows.filter((r) => r.querySelector('.gone') && [...r.querySelectorAll('.tx')]"
        ".every((t, _, all) => t.textContent === all[0].textContent)).length"
    )
    assert same_but_marked == 0
    expect(page.locator("#conflict-table")).to_be_hidden()
    expect(page.locator("#conflict-text")).to_contain_text(
        "Your text is kept and nothing is lost until you choose."  # no "on the right": no table
    )
    for choice in ("#conflict-reapply", "#conflict-overwrite", "#conflict-copy"):
        expect(page.locator(choice)).to_be_enabled()
    asked = answer_dialogs(page, [False])
    page.click("#conflict-overwrite")
    expect(page.locator("#file-message")).to_contain_text("Not overwritten")
    assert asked == [
        "Overwrite \u2068MEMORY.md\u2069 with your text? Version 3, saved by someone else, is "
        "replaced: "
        "whatever they changed is lost. There is no undo; to keep both, cancel and re-apply "
        "your edits."
    ]
    shot(page, "conflict-too-different.png")
    print(f"conflict shown in {shown:.1f} s")

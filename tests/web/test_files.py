"""The memory files in the page: edit → save → reload, the size limit and invalid content,
unsaved edits, keyboard tabs, the layout, failed loads, narrow screens."""

from __future__ import annotations

from playwright.sync_api import Page, Route, expect

from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    Console,
    OpenPage,
    SignedIn,
    answer_dialogs,
    append,
    shot,
    stored_file,
    tab,
)
from tests.web.server import Serve


def action_boxes(page: Page) -> list[dict[str, float]]:
    """Revert's and Save's boxes measured in one frame: two ``bounding_box`` calls could
    straddle a scroll the resize set off, so the sticky bar's two buttons seemed to sit on
    different rows (a CI run saw it at 360 px)."""
    boxes: list[dict[str, float]] = page.evaluate(
        """() => ["revert", "save"].map((b) => {
            const r = document.getElementById("file-" + b).getBoundingClientRect();
            return {x: r.x, y: r.y, width: r.width, height: r.height};
        })"""
    )
    return boxes


def test_edit_save_reload_shows_the_text_and_the_new_version(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    tab(page, "user")
    expect(page.locator("#file-version")).to_have_text("version 1")
    expect(page.locator("#file-state")).to_have_text("Saved")
    expect(page.locator("#file-save")).to_be_disabled()
    append(page, "\n- Likes oolong tea")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    expect(page.locator("#tab-user")).to_have_class("unsaved")
    page.keyboard.press("Control+s")  # the keyboard shortcut saves
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 2.")
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Saved")
    append(page, "\n- and green tea")
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 3")
    # Save is disabled once saved: the focus goes back to the text, not to <body>
    expect(page.locator("#editor")).to_be_focused()

    page.reload()
    tab(page, "user")
    expect(page.locator("#file-version")).to_have_text("version 3")
    assert page.locator("#editor").input_value().endswith("\n- Likes oolong tea\n- and green tea")
    stored = stored_file(server, user, "user")
    assert stored["version"] == 3
    assert stored["content"] == page.locator("#editor").input_value()


def test_the_size_and_the_limit_come_from_the_server(signed_in: SignedIn) -> None:
    page = signed_in()
    tab(page, "soul")
    # the server under test runs with a 64 KiB limit; the page has no number of its own
    expect(page.locator("#file-size")).to_contain_text("of 64 KiB")
    size = len(page.locator("#editor").input_value().encode())
    expect(page.locator("#file-size")).to_have_attribute(
        "title", f"{size:,} of {MAX_CONTENT_BYTES:,} bytes (UTF-8)"
    )
    expect(page.locator("#files-view .note")).to_contain_text(
        "Its other instructions come from the service and are not changed here."
    )


def test_oversize_content_is_one_message_in_bytes_and_save_is_off(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    tab(page, "memory")
    original = page.locator("#editor").input_value()
    puts: list[str] = []
    page.on("request", lambda r: puts.append(r.url) if r.method == "PUT" else None)
    too_big = "x" * (MAX_CONTENT_BYTES + 10)
    page.fill("#editor", too_big)
    # One message, in the size's own unit: bytes, exact (in KiB, 10 bytes over reads "64 KiB
    # of 64 KiB"), and the size beside the meter says the same in the same unit.
    expect(page.locator("#file-size")).to_have_text(
        f"{len(too_big):,} of {MAX_CONTENT_BYTES:,} bytes"
    )
    expect(page.locator("#file-warning")).to_have_text(
        "Too large to save: 10 bytes over the limit. Shorten the file; Save is off until it fits."
    )
    # the page knows the server would refuse it (413): Save is off, and so is Ctrl+S
    expect(page.locator("#file-save")).to_be_disabled()
    # the warning says all there is: the quiet line below does not offer Ctrl+S meanwhile
    expect(page.locator("#file-message")).to_be_hidden()
    visible = page.locator("#files-view .banner:visible")
    expect(visible).to_have_count(1)
    shot(page, "oversize.png")
    # the longer size in bytes still fits the file bar on a phone
    for width in (320, 375):
        page.set_viewport_size({"width": width, "height": 800})
        boxes = action_boxes(page)
        assert boxes[0]["y"] == boxes[1]["y"], f"{width}: Save wrapped: {boxes}"
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{width}: {overflow}px too wide"
    shot(page, "oversize-phone.png")
    page.set_viewport_size({"width": 1200, "height": 800})
    page.locator("#editor").press("Control+s")
    page.wait_for_timeout(300)
    assert puts == []
    # shortened to the limit: Save is back, and the text is the user's to save
    page.locator("#editor").press("Control+End")
    for _ in range(10):
        page.locator("#editor").press("Backspace")
    expect(page.locator("#file-warning")).to_be_hidden()
    # at the limit, exact bytes: in KiB, 6 bytes under would read the same (test_size_near_limit)
    expect(page.locator("#file-size")).to_have_text(
        f"{MAX_CONTENT_BYTES:,} of {MAX_CONTENT_BYTES:,} bytes"
    )
    expect(page.locator("#file-save")).to_be_enabled()
    expect(page.locator("#file-message")).to_contain_text("Ctrl+S saves.")
    assert page.locator("#editor").input_value() == too_big[:-10]
    stored = stored_file(server, user, "memory")
    assert stored == {**stored, "version": 1, "content": original}


def test_a_proxys_413_is_refused_in_words_and_nothing_is_written(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    # A proxy in front of the server may take smaller bodies than the server's own limit:
    # then only the answer says the text is too large.
    console.allow(413)
    page = signed_in()
    tab(page, "memory")
    original = page.locator("#editor").input_value()

    def refuse(route: Route) -> None:
        if route.request.method != "PUT":
            route.continue_()
            return
        route.fulfill(status=413, content_type="text/html", body="<h1>413 Too Large</h1>")

    page.route("**/api/config/agent-files/memory", refuse)
    append(page, "\n- a note the proxy will not pass")
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_have_class("banner error")
    expect(message).to_have_text(
        "MEMORY.md is too large to save. Shorten it and save again. Nothing was written; your "
        "text is still in the editor."
    )
    assert page.locator("#editor").input_value().endswith("a note the proxy will not pass")
    stored = stored_file(server, user, "memory")
    assert stored == {**stored, "version": 1, "content": original}


def test_saving_a_blank_file_asks_first(signed_in: SignedIn, server: Serve, user: str) -> None:
    page = signed_in()
    tab(page, "soul")
    original = page.locator("#editor").input_value()
    assert original.strip()
    asked = answer_dialogs(page, [False, True, True])
    page.fill("#editor", "  \n\n")  # blank: only spaces and line breaks are left
    page.click("#file-save")  # declined: nothing is written, the blank draft stays
    expect(page.locator("#file-message")).to_have_text(
        "Not saved: SOUL.md is still version 1. Revert brings its text back."
    )
    shot(page, "blank-declined.png")
    assert asked == ["Save SOUL.md with no text? It replaces version 1, and there is no undo."]
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert page.locator("#editor").input_value() == "  \n\n"
    assert stored_file(server, user, "soul")["version"] == 1
    page.locator("#editor").press("Control+s")  # Ctrl+S asks too; accepted this time
    expect(page.locator("#file-message")).to_have_text("Saved SOUL.md as version 2.")
    assert len(asked) == 2
    assert stored_file(server, user, "soul")["content"] == "  \n\n"
    # blank already: saving another blank text replaces nothing, and is not asked about
    page.fill("#editor", "")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved SOUL.md as version 3.")
    # a file with text is saved without a question, as ever
    page.fill("#editor", original)
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved SOUL.md as version 4.")
    assert len(asked) == 2
    assert stored_file(server, user, "soul")["content"] == original


def test_invalid_content_is_refused_in_words(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(422)
    page = signed_in()
    tab(page, "user")
    page.evaluate(
        "() => { const e = document.getElementById('editor');"
        " e.value += '\\u0000'; e.dispatchEvent(new Event('input')); }"
    )
    page.click("#file-save")
    expect(page.locator("#file-message")).to_contain_text("The server refused this text:")
    expect(page.locator("#file-message")).to_contain_text("Nothing was written")
    assert stored_file(server, user, "user")["version"] == 1


def test_leaving_with_unsaved_changes_asks_first(signed_in: SignedIn) -> None:
    page = signed_in()
    tab(page, "user")
    append(page, "\nnot saved yet")
    dialogs: list[str] = []

    def dismiss(dialog: object) -> None:
        dialogs.append(dialog.type)  # type: ignore[attr-defined]
        dialog.dismiss()  # type: ignore[attr-defined]

    page.on("dialog", dismiss)
    page.close(run_before_unload=True)
    page.wait_for_timeout(500)
    assert dialogs == ["beforeunload"]
    assert not page.is_closed()


def test_file_tabs_work_from_the_keyboard(signed_in: SignedIn) -> None:
    page = signed_in()
    tab(page, "soul")
    page.focus("#tab-soul")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-user")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#tab-user")).to_be_focused()
    page.keyboard.press("End")
    expect(page.locator("#tab-memory")).to_have_attribute("aria-selected", "true")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-soul")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#editor-label")).to_have_text("SOUL.md content")


# Cumulative layout shift as Chromium measures it (the Core Web Vitals metric).
_LAYOUT_SHIFT = """
window.__layoutShift = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (!entry.hadRecentInput) window.__layoutShift += entry.value;
  }
}).observe({ type: "layout-shift", buffered: true });
"""


def test_loading_the_page_does_not_move_the_layout(signed_in: SignedIn, server: Serve) -> None:
    page = signed_in()
    page.add_init_script(_LAYOUT_SHIFT)
    for view in ("files", "skills", "search"):
        page.goto(f"{server.url}/#{view}")
        page.reload()  # signed in from the tab's storage: the view loads straight away
        expect(page.locator(f"#{view}-view")).to_be_visible()
        expect(page.locator("#file-version")).to_have_text("version 1")
        expect(page.locator("#skill-list")).to_have_attribute("aria-busy", "false")
        page.wait_for_timeout(300)
        shift = page.evaluate("window.__layoutShift")
        assert shift < 0.01, f"{view}: layout shift {shift}"


def test_a_bad_request_is_shown_in_words(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(400)
    page = signed_in()
    tab(page, "user")

    def garble_if_match(route: Route) -> None:  # a proxy that mangles the header
        route.continue_(headers={**route.request.headers, "if-match": "version one"})

    page.route("**/api/config/agent-files/user", garble_if_match)
    append(page, "\nedited")
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_contain_text("The request was refused: ")
    expect(message).to_contain_text("If-Match")
    expect(message).to_contain_text("Nothing was written; your text is still in the editor.")
    assert stored_file(server, user, "user")["version"] == 1


def test_revert_asks_before_discarding_the_edits(signed_in: SignedIn) -> None:
    page = signed_in()
    tab(page, "user")
    original = page.locator("#editor").input_value()
    append(page, "\nAn hour of careful notes")
    asked = answer_dialogs(page, [False, True])
    page.click("#file-revert")  # declined: nothing changes
    expect(page.locator("#editor")).to_have_value(original + "\nAn hour of careful notes")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert asked == ["Discard your unsaved changes to USER.md and go back to version 1?"]
    page.click("#file-revert")  # accepted
    expect(page.locator("#editor")).to_have_value(original)
    expect(page.locator("#file-message")).to_have_text("Reverted to version 1.")
    expect(page.locator("#editor")).to_be_focused()
    assert len(asked) == 2


def test_ctrl_s_without_changes_writes_nothing(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    tab(page, "user")
    puts: list[str] = []
    page.on(
        "request", lambda request: puts.append(request.url) if request.method == "PUT" else None
    )
    page.locator("#editor").focus()
    page.keyboard.press("Control+s")
    page.wait_for_timeout(500)
    assert puts == []
    expect(page.locator("#file-state")).to_have_text("Saved")
    assert stored_file(server, user, "user")["version"] == 1


def test_a_file_that_failed_to_load_says_so_and_loads_when_opened_again(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(503)
    page = open_page()
    reads: list[str] = []

    def unavailable(route: Route) -> None:
        reads.append(route.request.method)
        route.fulfill(
            status=503,
            content_type="application/json",
            body='{"detail": "the database is unavailable; try again shortly"}',
        )

    page.route("**/api/config/agent-files/soul", unavailable)
    page.fill("#token", server.token(user))
    page.press("#token", "Enter")
    failed = (
        "Could not load SOUL.md. The database is unavailable; try again shortly. "
        "Press Retry to try again."
    )
    # not "Saved", not "0 B": it says what is wrong and offers to try again
    expect(page.locator("#file-state")).to_have_text("Not loaded")
    expect(page.locator("#file-message")).to_have_text(failed)
    expect(page.locator("#file-size")).to_have_text("– of 64 KiB")
    expect(page.locator("#editor")).to_be_disabled()
    expect(page.locator("#file-save")).to_be_disabled()
    expect(page.locator("#file-retry")).to_be_visible()
    tab(page, "user")
    expect(page.locator("#file-retry")).to_be_hidden()
    # the message already has this text, so wait for the read's answer: the
    # text alone can match before the read is even sent
    with page.expect_response("**/api/config/agent-files/soul"):
        page.click("#tab-soul")  # opening the tab again tries again, and says so again
    expect(page.locator("#file-message")).to_have_text(failed)
    assert len(reads) == 2
    with page.expect_response("**/api/config/agent-files/soul"):
        page.click("#file-retry")
    expect(page.locator("#file-message")).to_have_text(failed)
    assert len(reads) == 3
    page.unroute("**/api/config/agent-files/soul")
    page.click("#nav a[data-view=skills]")
    page.click("#nav a[data-view=files]")  # opening the view again tries again
    expect(page.locator("#file-version")).to_have_text("version 1")
    expect(page.locator("#file-state")).to_have_text("Saved")
    expect(page.locator("#file-message")).to_have_class("banner quiet")
    expect(page.locator("#file-retry")).to_be_hidden()
    expect(page.locator("#editor")).to_be_enabled()


def test_the_file_bar_and_the_user_id_fit_narrow_screens(signed_in: SignedIn, user: str) -> None:
    page = signed_in(width=375)
    tab(page, "user")
    append(page, "\nx")  # "Unsaved changes": the state's longest usual text
    for width in (320, 360, 375, 721, 740, 760, 1200):
        page.set_viewport_size({"width": width, "height": 800})
        boxes = action_boxes(page)
        assert boxes[0]["y"] == boxes[1]["y"], f"{width}: Save wrapped: {boxes}"
        assert boxes[1]["x"] + boxes[1]["width"] <= width, width
        # the whole user id is shown, not cut to a letter or two
        who = page.locator("#who").evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert who[0] <= who[1], f"{width}: the user id {user} is cut ({who})"
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{width}: {overflow}px too wide"

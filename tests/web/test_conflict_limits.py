"""The size limit in the conflict view: the user's text over the server's limit turns
re-apply and overwrite off, as it turns Save off, and a re-applied result over the limit is
said to be too large, with the user's text kept."""

from __future__ import annotations

from playwright.sync_api import Page, Request, expect

from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    Console,
    SignedIn,
    answer_dialogs,
    append,
    put_elsewhere,
    shot,
    stored_file,
    tab,
)
from tests.web.server import Serve

# Holds the next PUT until the test calls window.__release() (then lets later ones through):
# the editor stays open while a save is out, so the text can grow past the limit meanwhile.
_HOLD_ONE_PUT = """() => {
  const fetch = window.fetch;
  window.__release = null;
  window.fetch = async (url, init) => {
    if (init && init.method === "PUT") {
      window.fetch = fetch;
      await new Promise((go) => { window.__release = go; });
    }
    return fetch(url, init);
  };
}"""

OVER_IN_CONFLICT = (
    "Too large to save: 10 bytes over the limit. Re-apply and overwrite are off until it "
    "fits: edit your text to shorten it, or copy it."
)
OVER_IN_EDITOR = (
    "Too large to save: 10 bytes over the limit. Shorten the file; Save is off until it fits."
)


def test_a_text_over_the_limit_in_a_conflict_cannot_be_re_applied_or_overwritten(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "memory")
    put_elsewhere(server, user, "memory", "- written elsewhere\n")
    page.evaluate(_HOLD_ONE_PUT)
    append(page, "\n- typed")
    page.click("#file-save")
    page.wait_for_function("window.__release !== null")
    mine = "x" * (MAX_CONTENT_BYTES + 10)
    paste(page, mine)  # pasted while the save is out
    page.evaluate("window.__release()")
    expect(page.locator("#conflict")).to_be_visible()
    sent: list[str] = []

    def record(request: Request) -> None:
        if request.method in ("PUT", "POST"):
            sent.append(f"{request.method} {request.url}")

    page.on("request", record)
    reapply, overwrite = page.locator("#conflict-reapply"), page.locator("#conflict-overwrite")
    # the rule Save follows: the server would refuse the text (413), so neither is offered
    expect(reapply).to_be_disabled()
    expect(overwrite).to_be_disabled()
    # the warning Save has, in the conflict view beside the choices it turns off (a long
    # diff puts the file bar a screen away), and not twice
    warning = page.locator("#conflict-limit")
    expect(warning).to_have_text(OVER_IN_CONFLICT)
    expect(page.locator("#file-warning")).to_be_hidden()
    expect(page.locator("#file-size")).to_have_text(f"{len(mine):,} of {MAX_CONTENT_BYTES:,} bytes")
    for button in (reapply, overwrite):
        expect(button).to_have_accessible_description(OVER_IN_CONFLICT)
    # one message: the quiet line does not offer the choices the warning says are off
    expect(page.locator("#file-message")).to_be_hidden()
    shorten = page.locator("#conflict-shorten")
    expect(shorten).to_be_visible()
    expect(shorten).to_be_focused()
    shot(page, "conflict-over-limit.png")
    for button in (reapply, overwrite):
        button.dispatch_event("click")
    page.wait_for_timeout(300)
    assert sent == []

    # back to the editor with the text, on the version the user started from
    shorten.click()
    expect(page.locator("#conflict")).to_be_hidden()
    expect(page.locator("#editor")).to_be_focused()
    assert page.locator("#editor").input_value() == mine
    expect(page.locator("#file-version")).to_have_text("version 1")
    expect(page.locator("#file-warning")).to_have_text(OVER_IN_EDITOR)
    expect(page.locator("#file-message")).to_have_text(
        "Your text is back in the editor. Shorten it, then save: version 2 is shown beside it "
        "again, to re-apply your edits or overwrite."
    )
    shot(page, "conflict-shorten.png")
    page.locator("#editor").press("Control+End")
    for _ in range(10):
        page.locator("#editor").press("Backspace")
    page.click("#file-save")
    # under the limit: the same conflict, now with its choices
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#files-view .banner.warn:visible")).to_have_count(0)
    expect(shorten).to_be_hidden()
    expect(reapply).to_be_enabled()
    expect(overwrite).to_be_enabled()
    expect(reapply).to_have_accessible_description("")
    answer_dialogs(page, [True])  # Overwrite asks first (test_conflict_overwrite.py)
    overwrite.click()
    expect(page.locator("#file-message")).to_have_text("Saved MEMORY.md as version 3.")
    assert stored_file(server, user, "memory")["content"] == mine[:-10]


def paste(page: Page, text: str) -> None:
    """``text`` into the editor as one paste: one input event, as ``fill`` sends, but
    without Chromium's insertText, which took 11 s for 40 KB (30 s under CI load: a
    timeout) where the page itself handles the event in 50 ms."""
    page.locator("#editor").evaluate(
        "(editor, text) => { editor.value = text;"
        " editor.dispatchEvent(new Event('input', {bubbles: true})); }",
        text,
    )


def test_a_re_applied_result_over_the_limit_says_so_and_keeps_the_users_text(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    # Each text is under the limit (the server's merge checks each: no 413), but the edits
    # together are over it: the page says so, not "check the result, then save".
    console.allow(409)
    base = "# MEMORY\n- one\n- two\n- three\n"
    put_elsewhere(server, user, "memory", base)
    page = signed_in()
    tab(page, "memory")
    block = MAX_CONTENT_BYTES * 5 // 8  # two of them are over the limit, one is not
    theirs = "- stored elsewhere\n" * (block // 19) + base
    mine = base + "- typed in the page\n" * (block // 20)
    assert put_elsewhere(server, user, "memory", theirs) == 3
    paste(page, mine)
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-reapply")).to_be_enabled()
    with page.expect_response("**/web/merge") as merge:
        page.click("#conflict-reapply")
    assert merge.value.status == 200
    merged = theirs + mine[len(base) :]
    over = len(merged.encode()) - MAX_CONTENT_BYTES
    assert over > 0
    message = page.locator("#file-message")
    expect(message).to_have_text(
        "Your edits were re-applied on top of version 3; together they are too large to save. "
        "Shorten the result, then save. Your text as you left it is on the side."
    )
    expect(message).to_have_class("banner warn")
    expect(page.locator("#file-warning")).to_have_text(
        f"Too large to save: {over:,} bytes over the limit. Shorten the file; Save is off until "
        "it fits."
    )
    expect(page.locator("#file-save")).to_be_disabled()
    assert page.locator("#editor").input_value() == merged
    assert page.locator("#kept-text").input_value() == mine
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    shot(page, "reapplied-over-limit.png")
    assert stored_file(server, user, "memory")["version"] == 3

"""A save met by a 409 whose newer version holds the very text sent: the server's default
(the spec's conflict, ``same_content: true``) for a retry of a save whose answer was lost,
or for a text another writer stored first. The page takes it as saved, from the 409 alone,
and keeps what was typed while the save was out, unsaved on top; it had fetched the file
and compared it with the editor as it was by then, so text typed meanwhile turned the
user's own text into a conflict view. Real ``memstrata serve``, PostgreSQL, Chromium."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.web.conftest import (
    Console,
    SignedIn,
    append,
    put_elsewhere,
    stored_file,
    tab,
)
from tests.web.server import Serve

# Holds every PUT until the test calls window.__release() (the save is out meanwhile).
_HOLD_PUTS = """() => {
  const fetch = window.fetch;
  window.__release = null;
  window.fetch = async (url, init) => {
    if (init && init.method === "PUT") await new Promise((go) => { window.__release = go; });
    return fetch(url, init);
  };
}"""


def test_a_409_holding_the_sent_text_is_saved_and_keeps_what_was_typed_since(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "memory")
    sent = page.locator("#editor").input_value() + "\n- the same line, saved twice"
    # The first save's write landed as version 2; its answer never came back.
    assert put_elsewhere(server, user, "memory", sent) == 2
    page.fill("#editor", sent)
    page.evaluate(_HOLD_PUTS)
    gets: list[str] = []
    page.on(
        "request",
        lambda r: gets.append(r.url) if r.method == "GET" and "agent-files" in r.url else None,
    )
    with page.expect_response(lambda r: r.request.method == "PUT") as answer:
        page.click("#file-save")
        page.wait_for_function("window.__release !== null")
        append(page, " TYPED WHILE SAVING")
        page.evaluate("window.__release()")
    body = answer.value.json()
    assert (answer.value.status, body["same_content"], body["current_version"]) == (409, True, 2)
    expect(page.locator("#file-message")).to_have_text(
        "MEMORY.md already holds your text: version 2. What you typed since is not saved yet."
    )
    expect(page.locator("#conflict")).to_be_hidden()
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert page.locator("#editor").input_value() == sent + " TYPED WHILE SAVING"
    assert gets == []  # told by the 409 alone
    page.evaluate("window.__release = null")  # the next PUT is held too: release it
    append(page, "!")
    page.click("#file-save")
    page.wait_for_function("window.__release !== null")
    page.evaluate("window.__release()")
    expect(page.locator("#file-message")).to_have_text("Saved MEMORY.md as version 3.")
    expect(page.locator("#file-state")).to_have_text("Saved")
    stored = stored_file(server, user, "memory")
    assert (stored["version"], stored["content"]) == (3, sent + " TYPED WHILE SAVING!")


def test_a_409_holding_the_sent_text_is_saved_with_nothing_typed_since(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "user")
    sent = page.locator("#editor").input_value() + "\n- Likes oolong tea"
    put_elsewhere(server, user, "user", sent)
    page.fill("#editor", sent)
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(
        "USER.md already holds your text: version 2."
    )
    expect(page.locator("#file-state")).to_have_text("Saved")
    expect(page.locator("#conflict")).to_be_hidden()
    assert stored_file(server, user, "user")["version"] == 2  # nothing written again

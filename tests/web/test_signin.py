"""Sign-in: the token stays in the tab, bad and expired tokens say why and return here."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Dialog, Page, Route, expect

from tests.api.auth import token_of
from tests.web.conftest import Console, OpenPage, answer_dialogs, sign_in, stored_file
from tests.web.server import Serve


def test_a_bad_token_is_refused_with_the_reason(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(401)
    page = open_page()
    expect(page.locator("#signin-view")).to_be_visible()
    expect(page.locator("#nav")).to_be_hidden()
    page.fill("#token", "not-a-token")
    page.click("#signin-submit")
    # in words for the person at the page, not the API's (which name the server's settings
    # and `memstrata token`, for the platform's engineers)
    error = page.locator("#signin-error")
    expect(error).to_have_text(
        "That is not a sign-in token. Copy it again, whole and without quotes."
    )
    forged = token_of(user, "x" * 40, ttl_s=60)
    page.fill("#token", forged)
    page.click("#signin-submit")
    expect(error).to_have_text("This sign-in token is not valid or has expired. Ask for a new one.")
    expired = server.token(user, ttl_s=-60)
    page.fill("#token", expired)
    page.click("#signin-submit")
    expect(error).to_have_text("This sign-in token has expired. Ask for a new one.")
    expect(error).not_to_contain_text("MEMSTRATA_")
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") is None
    expect(page.locator("#files-view")).to_be_hidden()


def test_a_good_token_signs_in_for_this_tab_only(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    token = server.token(user)
    sign_in(page, token)
    expect(page.locator("#who")).to_have_text(user)
    expect(page.locator("#nav")).to_be_visible()
    assert token not in page.url
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") == token
    assert page.evaluate("localStorage.length") == 0
    assert token not in page.evaluate("document.cookie")
    # a reload keeps the tab signed in; a new tab is not
    page.reload()
    expect(page.locator("#editor")).to_be_enabled()
    expect(page.locator("#who")).to_have_text(user)
    other = open_page()
    expect(other.locator("#signin-view")).to_be_visible()
    # signing out forgets the token
    page.click("#signout")
    expect(page.locator("#signin-view")).to_be_visible()
    expect(page.locator("#signin-error")).to_have_text("Signed out.")
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") is None


def test_an_expiring_token_returns_to_sign_in_and_keeps_the_draft(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    with server.rest(user) as rest:  # provisioned up front: signing in is then quick
        rest.get("/api/config/agent-files/memory").raise_for_status()
    page = open_page()
    sign_in(page, server.token(user, ttl_s=8))
    page.click("#tab-memory")
    expect(page.locator("#file-version")).to_have_text("version 1")
    page.locator("#editor").press("End")
    page.locator("#editor").press_sequentially("\n- draft typed before expiry")
    expect(page.locator("#signin-view")).to_be_visible()
    expect(page.locator("#signin-error")).to_contain_text("Your token expired")
    expect(page.locator("#signin-error")).to_contain_text("Unsaved edits stay in this page")
    # meanwhile someone else writes the file: the kept draft must not silently replace it
    with server.rest(user) as rest:
        rest.put(
            "/api/config/agent-files/memory",
            json={"content": "written while signed out"},
            headers={"If-Match": '"1"'},
        ).raise_for_status()
    sign_in(page, server.token(user))
    page.click("#tab-memory")
    assert page.locator("#editor").input_value().endswith("- draft typed before expiry")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    expect(page.locator("#file-version")).to_have_text("version 1")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-text")).to_contain_text("version 2 is stored now")


def test_a_token_refused_mid_session_returns_to_sign_in(
    signed_in: Callable[..., Page], server: Serve, console: Console, user: str
) -> None:
    console.allow(401)
    page = signed_in()
    forged = token_of(user, "y" * 40)
    page.evaluate("t => sessionStorage.setItem('memstrata.token', t)", forged)
    page.locator("#editor").press("End")
    page.locator("#editor").press_sequentially("\nunsaved line")
    page.click("#file-save")
    expect(page.locator("#signin-view")).to_be_visible()
    expect(page.locator("#signin-error")).to_have_text(
        "You were signed out: this sign-in token is no longer accepted. Sign in again with a "
        "new one. Unsaved edits stay in this page until you close it."
    )
    sign_in(page, server.token(user))
    assert page.locator("#editor").input_value().endswith("unsaved line")
    assert "unsaved line" not in stored_file(server, user, "soul")["content"]


def _refused_mid_session(page: Page, user: str, draft: str) -> None:
    """Type a draft, then have the token refused on save: back at sign-in, draft kept."""
    forged = token_of(user, "y" * 40)
    page.evaluate("t => sessionStorage.setItem('memstrata.token', t)", forged)
    page.locator("#editor").press("Control+End")
    page.locator("#editor").press_sequentially(draft)
    page.click("#file-save")
    expect(page.locator("#signin-error")).to_contain_text("You were signed out:")


def test_signing_in_as_someone_else_asks_before_dropping_the_drafts(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(401)
    other = f"{user}-other"
    page = open_page()
    sign_in(page, server.token(user))
    _refused_mid_session(page, user, "\nDRAFT OF THE FIRST USER")
    answers: list[bool] = []  # accept? for each confirmation, in order
    asked = answer_dialogs(page, answers)
    # declined: the page stays signed out and the drafts stay
    answers.append(False)
    page.fill("#token", server.token(other))
    page.press("#token", "Enter")
    expect(page.locator("#signin-error")).to_have_text(
        f"Not signed in: that token is for {other}. The unsaved changes of {user} are still "
        f"here; sign in as {user} to save them."
    )
    assert asked == [  # each id isolated (U+2068 … U+2069): test_bidi_and_ime.py
        f"This page holds unsaved changes of \u2068{user}\u2069. Sign in as \u2068{other}\u2069 "
        "and discard them?"
    ]
    expect(page.locator("#nav")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") is None
    sign_in(page, server.token(user))  # the same user again: no question, the draft is back
    expect(page.locator("#who")).to_have_text(user)
    expect(page.locator("#editor")).to_have_value(re.compile(r"\nDRAFT OF THE FIRST USER$"))
    assert len(asked) == 1
    # accepted: the other user's files, without the draft
    _refused_mid_session(page, user, "\nSECOND DRAFT")
    answers.append(True)
    page.fill("#token", server.token(other))
    page.press("#token", "Enter")
    expect(page.locator("#who")).to_have_text(other)
    expect(page.locator("#file-version")).to_have_text("version 1")
    expect(page.locator("#editor")).not_to_have_value(re.compile("DRAFT"))
    assert len(asked) == 2


def test_a_server_that_cannot_be_reached_keeps_the_token(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(503, text="net::ERR_FAILED")
    page = open_page()
    token = server.token(user)
    sign_in(page, token)
    page.route("**/api/config/limits", lambda route: route.abort())  # the server restarts
    page.reload()
    error = page.locator("#signin-error")
    # in words for the person at the page: no "Failed to fetch", no "is memstrata running?"
    expect(error).to_have_text(
        "Could not reach the server. Check your connection, then press Sign in to try again: "
        "your token is kept."
    )
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") == token

    def unavailable(route: Route) -> None:
        route.fulfill(status=503, content_type="application/json", body='{"detail": "starting"}')

    page.unroute("**/api/config/limits")
    page.route("**/api/config/limits", unavailable)
    page.click("#signin-submit")  # the field still holds the token
    expect(error).to_have_text(
        "Could not sign in. The server could not answer (HTTP 503: starting). "
        "Your token is kept: press Sign in to try again."
    )
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") == token

    def bad_gateway(route: Route) -> None:  # a proxy's own page: no text from memstrata
        route.fulfill(status=502, content_type="text/html", body="<h1>502 Bad Gateway</h1>")

    console.allow(502)
    page.unroute("**/api/config/limits")
    page.route("**/api/config/limits", bad_gateway)
    page.click("#signin-submit")
    expect(error).to_have_text(
        "Could not sign in. The server could not answer (HTTP 502 Bad Gateway). "
        "Your token is kept: press Sign in to try again."
    )
    page.unroute("**/api/config/limits")
    page.click("#signin-submit")  # the server is back: the retry signs in
    expect(page.locator("#files-view")).to_be_visible()
    expect(page.locator("#who")).to_have_text(user)


DAY_MS = 86_400_000


def test_a_token_valid_for_a_month_lasts_a_month(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    page.clock.install()
    page.reload()
    sign_in(page, server.token(user, ttl_s=30 * DAY_MS / 1000))
    # past setTimeout's longest delay (2^31 - 1 ms, 24.8 days): still signed in
    page.clock.run_for(25 * DAY_MS)
    expect(page.locator("#files-view")).to_be_visible()
    expect(page.locator("#signin-view")).to_be_hidden()
    page.clock.run_for(5 * DAY_MS + 60_000)
    expect(page.locator("#signin-view")).to_be_visible()
    expect(page.locator("#signin-error")).to_contain_text("Your token expired")


def test_a_token_with_characters_no_token_has_is_refused_before_sending(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    sent: list[str] = []
    page.on("request", lambda request: sent.append(request.url))
    token = server.token(user)
    # "…" from a text editor's autocorrect, a Cyrillic "а" that looks like a Latin one
    for bad in (token[:-4] + "…", token[:40] + "\u0430" + token[40:]):
        page.fill("#token", bad)
        page.click("#signin-submit")
        expect(page.locator("#signin-error")).to_have_text(
            "This token contains characters a token cannot have; copy it again."
        )
        expect(page.locator("#token")).to_be_focused()
        expect(page.locator("#token")).to_have_value(bad)
    assert not [url for url in sent if "/api/" in url]


def test_whitespace_in_a_pasted_token_is_ignored_and_a_refused_token_stays_in_the_field(
    open_page: OpenPage, server: Serve, console: Console, user: str
) -> None:
    console.allow(401)
    page = open_page()
    page.fill("#token", "not-a-token")
    page.click("#signin-submit")
    expect(page.locator("#signin-error")).to_contain_text("That is not a sign-in token")
    expect(page.locator("#token")).to_have_value("not-a-token")  # to compare with what was copied
    token = server.token(user)
    # copied from a wrapped terminal line or an e-mail: spaces and tabs inside the JWT
    sign_in(page, f"Bearer  {token[:30]} \t {token[30:60]}\t{token[60:]} ")
    expect(page.locator("#who")).to_have_text(user)
    assert page.evaluate("sessionStorage.getItem('memstrata.token')") == token


def test_focus_goes_to_the_token_field_after_an_error_and_to_the_editor_after_sign_in(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    page.click("#signin-submit")  # nothing pasted
    expect(page.locator("#signin-error")).to_have_text("Paste your access token first.")
    expect(page.locator("#token")).to_be_focused()
    sign_in(page, server.token(user))
    expect(page.locator("#editor")).to_be_focused()


def test_signing_out_and_discarding_leaves_nothing_behind(
    signed_in: Callable[..., Page], user: str
) -> None:
    page = signed_in()
    page.locator("#editor").press("Control+End")
    page.locator("#editor").press_sequentially("\nDRAFT TO DISCARD")
    dialogs: list[str] = []

    def answer(dialog: Dialog) -> None:
        dialogs.append(dialog.type)
        if dialog.type == "confirm":
            dialog.accept()  # "Sign out and discard them?" yes
        else:
            dialog.dismiss()

    page.on("dialog", answer)
    page.click("#signout")
    expect(page.locator("#signin-view")).to_be_visible()
    assert page.evaluate("document.getElementById('editor').value") == ""
    assert page.locator("#file-tabs [role=tab]").count() == 0
    with page.expect_event("close", timeout=5_000):  # discarded: leaving does not ask again
        page.close(run_before_unload=True)
    assert dialogs == ["confirm"]

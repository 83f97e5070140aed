"""The page in an end user's words, sign-in that says it is working, and a Tab order that
follows the work: the file's tab, its text, then Revert and Save."""

from __future__ import annotations

from playwright.sync_api import Route, expect

from tests.web.conftest import OpenPage, SignedIn, append, sign_in, tab
from tests.web.server import Serve

# the words of developers, which an end user of the page never needs
DEVELOPER_WORDS = ("memstrata token", "this API", "template", "Bearer", "Authorization")


def test_the_files_view_tells_the_end_user_what_the_files_are(signed_in: SignedIn) -> None:
    """It said "AGENTS.md is the platform's template: it is not part of this API"."""
    page = signed_in()
    note = page.locator("#files-view .note")
    expect(note).to_have_text(
        "Your agent's personality (SOUL.md), what it knows about you (USER.md) and its notes "
        "(MEMORY.md). Its other instructions come from the service and are not changed here."
    )
    seen = page.locator("#files-view").inner_text()
    assert not [word for word in DEVELOPER_WORDS if word in seen]


def test_sign_in_keeps_the_developer_hint_behind_for_developers(
    open_page: OpenPage,
) -> None:
    """It said "Development server: memstrata token --user alice" to everyone."""
    page = open_page()
    expect(page.locator("#signin-view")).to_be_visible()
    seen = page.locator("#signin-form").inner_text()
    assert not [word for word in DEVELOPER_WORDS if word in seen], seen
    expect(page.get_by_label("Access token")).to_be_visible()
    expect(page.locator("#signin-form .hint").first).to_have_text(
        "No token? Ask whoever gave you access to this service."
    )
    page.get_by_text("For developers").click()
    expect(page.locator("#signin-form details")).to_contain_text("memstrata token --user alice")
    page.click("#signin-submit")
    expect(page.locator("#signin-error")).to_have_text("Paste your access token first.")


def test_signing_in_says_so_while_the_server_is_slow(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    held: list[Route] = []
    page.route("**/api/config/limits", lambda route: held.append(route))
    page.fill("#token", server.token(user))
    page.press("#token", "Enter")
    while not held:
        page.wait_for_timeout(50)
    submit = page.locator("#signin-submit")
    expect(submit).to_have_text("Signing in…")
    expect(submit).to_be_disabled()
    expect(page.locator("#signin-error")).to_have_text("Signing in…")
    expect(page.locator("#signin-error")).to_have_attribute("role", "status")
    held[0].continue_()
    expect(page.locator("#editor")).to_be_enabled()
    expect(page.locator("#signin-view")).to_be_hidden()
    expect(submit).to_have_text("Sign in")


def test_a_reload_with_a_kept_token_says_it_is_signing_in(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    """Not an empty page while the server is slow to answer."""
    page = open_page()
    sign_in(page, server.token(user))
    held: list[Route] = []
    page.route("**/api/config/limits", lambda route: held.append(route))
    page.reload()
    while not held:
        page.wait_for_timeout(50)
    expect(page.locator("#signin-error")).to_have_text("Signing in…")
    held[0].continue_()
    expect(page.locator("#editor")).to_be_enabled()


def test_tab_goes_from_the_file_tab_to_the_editor_then_revert_and_save(
    signed_in: SignedIn,
) -> None:
    """Save and Revert came before the editor: a keyboard user passed them to reach the text
    and went back to save it."""
    page = signed_in()
    tab(page, "soul")
    append(page, "x")  # Revert and Save enabled
    page.focus("#tab-soul")
    for expected in ("editor", "file-revert", "file-save"):
        page.keyboard.press("Tab")
        expect(page.locator(f"#{expected}")).to_be_focused()
    # the bar is still drawn above the editor
    bar = page.locator(".filebar").bounding_box()
    editor = page.locator("#editor").bounding_box()
    assert bar and editor and bar["y"] + bar["height"] <= editor["y"]

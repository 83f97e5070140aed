"""What the page says while a save is out: a slow save of a small file is not put down to
indexing, and Ctrl+S pressed meanwhile is not dropped unsaid."""

from __future__ import annotations

from playwright.sync_api import Route, expect

from tests.web.conftest import SignedIn, append, stored_file, tab
from tests.web.save_support import on_put
from tests.web.server import Serve


def test_ctrl_s_during_a_slow_save_of_a_small_file_is_answered(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    tab(page, "user")
    held: list[Route] = []
    on_put(page, "user", held.append)  # a slow network: the save waits until let through
    append(page, "\n- first")
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_have_text("Still saving USER.md…")  # a small file: no "index" excuse
    append(page, "\n- second")
    page.locator("#editor").press("Control+s")
    expect(message).to_have_text(
        "Still saving USER.md: what you typed since is not in this save. Save again once it "
        "is done."
    )
    held[0].continue_()
    expect(message).to_have_text("Saved USER.md as version 2.")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert stored_file(server, user, "user")["content"].endswith("\n- first")

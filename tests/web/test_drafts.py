"""Unsaved drafts kept across a reload: in localStorage, per user and file, with the version
they were based on; offered back ("Restore / Discard"), through the conflict view when the
file moved meanwhile, cleared by a save and by Sign out."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.web.conftest import (
    Console,
    OpenPage,
    SignedIn,
    answer_dialogs,
    append,
    put_elsewhere,
    shot,
    sign_in,
    stored_file,
    tab,
)
from tests.web.server import Serve

DRAFT_KEYS = "Object.keys(localStorage).filter((k) => k.startsWith('memstrata.draft'))"


def _reload(page: Page, name: str) -> None:
    """Reload (signed in again from the tab's storage) and wait for file ``name``."""
    page.reload()
    expect(page.locator("#file-tabs [role=tab]")).to_have_count(3)
    tab(page, name)


def _typed_then_reloaded(page: Page, server: Serve, user: str, text: str) -> str:
    """USER.md with ``text`` typed on version 2, the page reloaded; the stored text."""
    base = "# USER.md\n- Name: Ada\n"
    put_elsewhere(server, user, "user", base)
    _reload(page, "user")
    expect(page.locator("#editor")).to_have_value(base)
    append(page, text)
    # what is kept is written as the user types (the reload must not wait for a save)
    page.wait_for_function(f"() => {DRAFT_KEYS}.length === 1")
    _reload(page, "user")
    return base


def test_a_draft_comes_back_after_a_reload_and_a_save_clears_it(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    page = signed_in()
    base = _typed_then_reloaded(page, server, user, "- Pronouns: she/her\n")
    offer = page.locator("#draft-offer")
    expect(offer).to_be_visible()
    expect(offer).to_contain_text(
        re.compile(r"You have unsaved changes to USER\.md from .+\. Restore them\?")
    )
    shot(page, "draft-offer.png")
    # nothing is typed over the stored text until the user has chosen
    expect(page.locator("#editor")).to_be_disabled()
    expect(page.locator("#tab-user")).to_have_class(re.compile(r"\bunsaved\b"))
    page.click("#draft-restore")
    expect(offer).to_be_hidden()
    expect(page.locator("#editor")).to_have_value(base + "- Pronouns: she/her\n")
    expect(page.locator("#editor")).to_be_focused()
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 3")
    assert stored_file(server, user, "user")["content"] == base + "- Pronouns: she/her\n"
    page.wait_for_function(f"() => {DRAFT_KEYS}.length === 0")  # saved: no longer kept
    _reload(page, "user")
    expect(page.locator("#draft-offer")).to_be_hidden()


def test_a_draft_of_a_file_changed_meanwhile_opens_the_conflict_view(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    page = signed_in()
    base = _typed_then_reloaded(page, server, user, "- Pronouns: she/her\n")
    expect(page.locator("#draft-offer")).to_be_visible()
    put_elsewhere(server, user, "user", "# USER.md (about Ada)\n- Name: Ada\n")  # version 3
    page.click("#draft-restore")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-text")).to_contain_text(
        "You started from version 2; version 3 is stored now."
    )
    page.click("#conflict-reapply")
    merged = "# USER.md (about Ada)\n- Name: Ada\n- Pronouns: she/her\n"
    expect(page.locator("#editor")).to_have_value(merged)
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 4")
    assert stored_file(server, user, "user")["content"] == merged
    assert base != merged


def test_discard_asks_and_forgets_the_draft(signed_in: SignedIn, server: Serve, user: str) -> None:
    page = signed_in()
    base = _typed_then_reloaded(page, server, user, "- not wanted\n")
    asked = answer_dialogs(page, [False, True])
    page.click("#draft-discard")
    expect(page.locator("#draft-offer")).to_be_visible()  # "no": still offered
    page.click("#draft-discard")
    expect(page.locator("#draft-offer")).to_be_hidden()
    expect(page.locator("#editor")).to_be_enabled()
    expect(page.locator("#editor")).to_have_value(base)
    assert len(asked) == 2 and asked[0].startswith("Discard your unsaved changes to USER.md")
    assert page.evaluate(DRAFT_KEYS) == []


def test_sign_out_clears_drafts_and_another_user_never_sees_them(
    open_page: OpenPage, server: Serve, user: str
) -> None:
    page = open_page()
    sign_in(page, server.token(user))
    _typed_then_reloaded(page, server, user, "- private to the first user\n")
    expect(page.locator("#draft-offer")).to_be_visible()
    # another user of the same browser: the first user's draft is not theirs to see
    page.evaluate("sessionStorage.clear()")
    page.reload()
    sign_in(page, server.token(f"{user}-other"))
    tab(page, "user")
    expect(page.locator("#draft-offer")).to_be_hidden()
    assert "private to the first user" not in page.locator("#editor").input_value()
    # back as the first user: offered again; Sign out then clears it from the browser
    page.click("#signout")  # the other user has nothing unsaved: no question
    sign_in(page, server.token(user))
    tab(page, "user")
    expect(page.locator("#draft-offer")).to_be_visible()
    answer_dialogs(page, [True])  # "You have unsaved changes. Sign out and discard them?"
    page.click("#signout")
    expect(page.locator("#signin-view")).to_be_visible()
    # (the record is one a closed tab left behind: the reload after sessionStorage.clear()
    # made this a new tab, and Sign out asks the browser which tabs are open before it goes)
    page.wait_for_function(f"() => {DRAFT_KEYS}.length === 0")
    sign_in(page, server.token(user))
    tab(page, "user")
    expect(page.locator("#draft-offer")).to_be_hidden()

"""The choices made at the places a re-apply left to the user are kept with their unsaved
text across a reload (file-drafts.js, the same record): restoring it into the same conflict
brings the places back as they were chosen; onto another version they are not, and the
places start afresh. A save clears them with the rest of the record."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.web.conflict_support import conflict_on
from tests.web.conftest import Console, SignedIn, put_elsewhere, stored_file, tab
from tests.web.server import Serve
from tests.web.test_conflict_places import BASE, MINE, THEIRS

DRAFTS = "Object.keys(localStorage).filter((k) => k.startsWith('memstrata.draft'))"
PLACES_KEPT = (
    f"() => {DRAFTS}.map((k) => JSON.parse(localStorage.getItem(k)))"
    ".filter((r) => r.places).map((r) => r.places)"
)


def _chosen_then_reloaded(page: Page, server: Serve, user: str) -> None:
    """Places 1 and 3 chosen (3: words of the user's own), place 2 not; then a reload."""
    conflict_on(page, server, user, BASE, MINE, THEIRS)
    page.click("#conflict-reapply")
    places = page.locator("#resolve-list > li")
    expect(places).to_have_count(3)
    places.nth(0).get_by_label("Keep version 3's lines").check()
    places.nth(2).get_by_label("Write it myself").check()
    places.nth(2).locator("textarea").fill("- nine (agreed)")
    # written as the user chooses and types, not at a save
    page.wait_for_function(
        f"() => JSON.stringify(({PLACES_KEPT})()) === "
        + json.dumps(
            json.dumps(
                [
                    {
                        "version": 3,
                        "chosen": ["theirs", None, "edit"],
                        "written": [None, None, "- nine (agreed)"],
                    }
                ],
                separators=(",", ":"),
            )
        )
    )
    page.reload()
    expect(page.locator("#file-tabs [role=tab]")).to_have_count(3)
    tab(page, "soul")
    expect(page.locator("#draft-offer")).to_be_visible()


def test_the_choices_at_each_place_come_back_after_a_reload(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    _chosen_then_reloaded(page, server, user)
    page.click("#draft-restore")
    # the same conflict (version 3 is still stored): back at the places, as chosen
    places = page.locator("#resolve-list > li")
    expect(places).to_have_count(3)
    expect(page.locator("#file-message")).to_contain_text(
        "Your choices at 2 of 3 places from before are back."
    )
    expect(places.nth(0).get_by_label("Keep version 3's lines")).to_be_checked()
    for label in ("Keep version 3's lines", "Keep your lines", "Write it myself"):
        expect(places.nth(1).get_by_label(label)).not_to_be_checked()
    expect(places.nth(2).get_by_label("Write it myself")).to_be_checked()
    expect(places.nth(2).locator("textarea")).to_have_value("- nine (agreed)")
    expect(page.locator("#resolve-status")).to_have_text("2 of 3 places chosen.")
    places.nth(1).get_by_label("Keep your lines").check()
    page.click("#resolve-apply")
    expected = (
        BASE.replace("- two", "- two (theirs)")
        .replace("- four", "- four (mine)")
        .replace("- six", "- six (mine)")
        .replace("- nine", "- nine (agreed)")
        .replace("- ten", "- ten\n- eleven (theirs)")
    )
    expect(page.locator("#editor")).to_have_value(expected)
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 4")
    assert stored_file(server, user, "soul")["content"] == expected
    page.wait_for_function(f"() => {DRAFTS}.length === 0")  # saved: nothing kept


def test_the_choices_are_not_restored_onto_another_version(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    _chosen_then_reloaded(page, server, user)
    # saved again elsewhere meanwhile: the places chosen at were version 3's
    put_elsewhere(server, user, "soul", THEIRS.replace("# Notes", "# Notes (v4)"))
    page.click("#draft-restore")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-reapply")).to_have_text("Reload version 4 and re-apply my edits")
    page.click("#conflict-reapply")
    places = page.locator("#resolve-list > li")
    expect(places).to_have_count(3)
    expect(page.locator("#resolve-status")).to_have_text("0 of 3 places chosen.")
    expect(places.nth(0).get_by_label("Keep version 4's lines")).not_to_be_checked()
    expect(page.locator("#file-message")).not_to_contain_text("from before are back")

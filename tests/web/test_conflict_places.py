"""When re-apply meets overlapping edits, the page shows each place the server's merge left to
the user (its exact lines, from ``merge3_parts``), lets them keep the other version's lines,
theirs, both or their own words there, and saves exactly that, with If-Match, the rest of
both edits merged. Previous/Next change by keyboard too (Alt+↑ / Alt+↓)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.web.conflict_support import conflict_on
from tests.web.conftest import Console, SignedIn, shot, stored_file
from tests.web.server import Serve

BASE = "# Notes\n- one\n- two\n- three\n- four\n- five\n- six\n- seven\n- eight\n- nine\n- ten\n"
# Three places where both edits change the same line; "- four" is the user's alone and
# "- eleven" the other writer's alone: merged without a question.
THEIRS = (
    BASE.replace("- two", "- two (theirs)")
    .replace("- six", "- six (theirs)")
    .replace("- nine", "- nine (theirs)")
    .replace("- ten", "- ten\n- eleven (theirs)")
)
MINE = (
    BASE.replace("- two", "- two (mine)")
    .replace("- four", "- four (mine)")
    .replace("- six", "- six (mine)")
    .replace("- nine", "- nine (mine)")
)


def test_each_place_is_chosen_and_the_choices_are_saved_exactly(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    conflict_on(page, server, user, BASE, MINE, THEIRS)
    page.click("#conflict-reapply")
    message = page.locator("#file-message")
    expect(message).to_have_text(
        "Your edits and version 3 change the same or neighbouring lines in 3 places, so those "
        "were not re-applied automatically: line 3 of version 3 (line 3 of your text), and 2 "
        "other places. Choose what to keep at each place below; the rest of your edits were "
        "re-applied."
    )
    places = page.locator("#resolve-list > li")
    expect(places).to_have_count(3)
    expect(page.locator("#editor-wrap")).to_be_hidden()
    first = places.nth(0)
    expect(first.locator("h3")).to_have_text(
        "Place 1 of 3: line 3 of version 3, line 3 of your text"
    )
    expect(first.locator(".place-theirs .place-line")).to_have_text(["- two (theirs)"])
    expect(first.locator(".place-mine .place-line")).to_have_text(["- two (mine)"])
    # a few lines either side, as merged: "- four (mine)" is there, re-applied
    expect(first.locator(".place-after .place-line")).to_have_text(
        ["- three", "- four (mine)", "- five"]
    )
    expect(places.nth(2).locator(".place-after .place-line")).to_have_text(
        ["- ten", "- eleven (theirs)", ""]
    )
    apply = page.locator("#resolve-apply")
    status = page.locator("#resolve-status")
    expect(status).to_have_text("0 of 3 places chosen.")
    expect(apply).to_be_disabled()
    shot(page, "places.png")

    first.get_by_label("Keep version 3's lines").check()
    places.nth(1).get_by_label("Keep both, version 3's first").check()
    third = places.nth(2)
    third.get_by_label("Write it myself").check()
    edit = third.locator("textarea")
    # to start from: both sides' lines
    expect(edit).to_have_value("- nine (theirs)\n- nine (mine)")
    edit.fill("- nine (agreed)")
    third.get_by_label("Keep your lines").check()  # and back: what was written is kept
    expect(edit).to_be_hidden()
    third.get_by_label("Write it myself").check()
    expect(edit).to_have_value("- nine (agreed)")
    expect(status).to_have_text("3 of 3 places chosen.")
    apply.click()

    expected = (
        BASE.replace("- two", "- two (theirs)")
        .replace("- four", "- four (mine)")
        .replace("- six", "- six (theirs)\n- six (mine)")
        .replace("- nine", "- nine (agreed)")
        .replace("- ten", "- ten\n- eleven (theirs)")
    )
    expect(page.locator("#resolve")).to_be_hidden()
    expect(page.locator("#editor")).to_have_value(expected)
    expect(page.locator("#editor")).to_be_focused()
    expect(message).to_contain_text("Your choices were applied on top of version 3.")
    # the user's text as they left it, beside the result, until the file is saved
    expect(page.locator("#kept-text")).to_have_value(MINE)
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 4")
    assert stored_file(server, user, "soul")["content"] == expected


def test_leaving_the_places_to_edit_by_hand_keeps_both_texts(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    conflict_on(page, server, user, BASE, MINE, THEIRS)
    page.click("#conflict-reapply")
    expect(page.locator("#resolve-list > li")).to_have_count(3)
    page.click("#resolve-leave")
    expect(page.locator("#resolve")).to_be_hidden()
    # as before the places existed: the stored version to edit, the user's text beside it
    expect(page.locator("#editor")).to_have_value(THEIRS)
    expect(page.locator("#kept-text")).to_have_value(MINE)
    expect(page.locator("#file-state")).to_have_text("Earlier text not saved")


def test_previous_and_next_change_by_keyboard(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    conflict_on(page, server, user, BASE, MINE, THEIRS)
    expect(page.locator("#conflict-next")).to_have_attribute("aria-keyshortcuts", "Alt+ArrowDown")
    expect(page.locator("#conflict-prev")).to_have_attribute("aria-keyshortcuts", "Alt+ArrowUp")
    at = page.locator("#conflict-at")
    expect(at).to_contain_text("Change 1 of 5,")
    page.locator("#conflict-table").focus()
    page.keyboard.press("Alt+ArrowDown")
    expect(at).to_contain_text("Change 2 of 5,")
    page.locator("#conflict-reapply").focus()  # from any control of the view
    page.keyboard.press("Alt+ArrowDown")
    expect(at).to_contain_text("Change 3 of 5,")
    page.keyboard.press("Alt+ArrowUp")
    page.keyboard.press("Alt+ArrowUp")
    page.keyboard.press("Alt+ArrowUp")
    expect(at).to_contain_text("Change 5 of 5,")  # wraps, as the buttons do
    expect(page.locator("#conflict-reapply")).to_be_focused()  # the focus stays


def test_previous_and_next_place_move_the_focus_to_each_place(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in(height=500)  # the places do not all fit: each is scrolled to
    conflict_on(page, server, user, BASE, MINE, THEIRS)
    page.click("#conflict-reapply")
    places = page.locator("#resolve-list > li")
    expect(places).to_have_count(3)
    prev = page.get_by_role("button", name="Previous place")
    next_ = page.get_by_role("button", name="Next place")
    expect(next_).to_have_attribute("aria-keyshortcuts", "Alt+ArrowDown")
    expect(prev).to_have_attribute("aria-keyshortcuts", "Alt+ArrowUp")
    # at the first place (its first choice has the focus): no place before it
    expect(page.locator("#place-0-theirs")).to_be_focused()
    expect(prev).to_be_disabled()
    expect(places.nth(2)).not_to_be_in_viewport()
    next_.focus()
    page.keyboard.press("Enter")
    expect(places.nth(1)).to_be_focused()
    expect(places.nth(1)).to_have_accessible_name(
        "Place 2 of 3: line 7 of version 3, line 7 of your text"
    )
    expect(places.nth(1)).to_be_in_viewport()
    expect(prev).to_be_enabled()
    next_.click()
    expect(places.nth(2)).to_be_focused()
    expect(places.nth(2)).to_be_in_viewport()
    expect(next_).to_be_disabled()  # the last place
    expect(prev).to_be_in_viewport()  # the buttons stay in reach above the places
    shot(page, "places-next.png")
    # from the place itself, by keyboard
    page.keyboard.press("Alt+ArrowUp")
    expect(places.nth(1)).to_be_focused()
    # a choice made at a place: stepping goes on from there
    places.nth(0).get_by_label("Keep your lines").check()
    expect(prev).to_be_disabled()
    page.keyboard.press("Alt+ArrowDown")
    expect(places.nth(1)).to_be_focused()
    expect(places.nth(0).get_by_label("Keep your lines")).to_be_checked()  # not changed
    # in a place's own text box the keys are the box's (they move the caret on a Mac)
    places.nth(2).get_by_label("Write it myself").check()
    places.nth(2).locator("textarea").focus()
    page.keyboard.press("Alt+ArrowUp")
    expect(places.nth(2).locator("textarea")).to_be_focused()

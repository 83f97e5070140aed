"""The conflict view's two sides and its Overwrite: each differing line says whose change it
is (the other writer's additions were red, read as deletions, and nothing said who
changed what), and Overwrite asks first, naming what is lost (one click discarded the
other writer's change)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.web.conftest import (
    Console,
    SignedIn,
    answer_dialogs,
    put_elsewhere,
    shot,
    stored_file,
    tab,
)
from tests.web.server import Serve

BASE = "one\ntwo\nthree\nfour"
# the other writer adds a line on top and removes "three"; the user removes "four" and
# adds a line at the end
THEIRS = "WRITTEN ELSEWHERE\none\ntwo\nfour"
MINE = "one\ntwo\nthree\nMINE"


def _conflict(page: Page, server: Serve, user: str, mine: str = MINE) -> None:
    tab(page, "user")
    page.fill("#editor", BASE)
    page.click("#file-save")
    expect(page.locator("#file-version")).to_have_text("version 2")
    put_elsewhere(server, user, "user", THEIRS)
    page.fill("#editor", mine)
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()


def test_each_side_says_whose_change_a_line_is(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    _conflict(page, server, user)
    table = page.get_by_role("table", name="Line differences")
    expect(table.get_by_role("columnheader")).to_have_text(
        ["Saved by someone else · version 3", "Your text (not saved)"]
    )
    for name in (
        "added by someone else: WRITTEN ELSEWHERE",
        "removed by someone else: three",
        "removed by you: four",
        "added by you: MINE",
    ):
        expect(table.get_by_role("cell", name=name, exact=True)).to_have_count(1)
    # to the eye: a sign beside each line, and one colour per writer — never the red that
    # read as "deleted" for a line the other writer added
    stored, mine = page.locator("[data-side=stored]"), page.locator("[data-side=mine]")
    added_by_them = stored.filter(has_text="WRITTEN ELSEWHERE")
    expect(added_by_them.locator(".sign")).to_have_text("+")
    expect(mine.filter(has_text="three").locator(".sign")).to_have_text("−")
    background = "e => getComputedStyle(e).backgroundColor"
    theirs_colour = added_by_them.evaluate(background)
    assert theirs_colour == mine.filter(has_text="three").evaluate(background)
    assert theirs_colour != mine.filter(has_text="MINE").evaluate(background)
    red, _, blue = (int(n) for n in theirs_colour[4:-1].split(", "))
    assert blue > red, theirs_colour
    legend = page.get_by_role("list", name="Legend")
    expect(legend).to_contain_text("Someone else's change (version 3)")
    expect(legend).to_contain_text("Your change")
    expect(page.locator("#conflict-count")).to_have_text(
        "2 changes: 1 by someone else, 1 by both of you. Unchanged lines are folded."
    )
    shot(page, "conflict-sides.png")


def test_overwrite_asks_first_and_names_what_is_lost(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    _conflict(page, server, user)
    answers = [False]
    asked = answer_dialogs(page, answers)
    page.click("#conflict-overwrite")
    question = (
        "Overwrite \u2068USER.md\u2069 with your text? Version 3, saved by someone else, is "
        "replaced: the 1 line they added or changed (from line 1: \u201c\u2068WRITTEN "
        "ELSEWHERE\u2069\u201d) is lost, and the 1 line they removed comes back. There is no "
        "undo; to keep both, cancel and re-apply your edits."
    )
    assert asked == [question]
    # declined: nothing written, the conflict view as it was
    expect(page.locator("#file-message")).to_have_text(
        "Not overwritten: version 3 stays as it is. Your text is still beside it."
    )
    expect(page.locator("#conflict")).to_be_visible()
    assert stored_file(server, user, "user")["version"] == 3
    answers.append(True)
    page.click("#conflict-overwrite")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 4.")
    assert asked == [question, question]
    assert stored_file(server, user, "user")["content"] == MINE


def test_overwriting_with_a_blank_text_is_one_question(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    # the first question is the blank save's, which meets the other writer's version
    asked = answer_dialogs(page, [True, True])
    _conflict(page, server, user, mine=" \n")
    assert asked == ["Save USER.md with no text? It replaces version 2, and there is no undo."]
    page.click("#conflict-overwrite")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 4.")
    assert len(asked) == 2  # Overwrite asks once, the blank text in the same question
    assert asked[1].endswith(
        "is lost. Your text is blank: the file is emptied. There is no undo; to keep "
        "both, cancel and re-apply your edits."
    )
    assert stored_file(server, user, "user")["content"] == " \n"

"""The memory files in the page when they are written elsewhere (another tab, REST, the
agent): the conflict view, no text lost, a file shown afresh when opened again, CRLF line
endings kept."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from playwright.sync_api import Page, Route, expect

from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    Console,
    SignedIn,
    answer_dialogs,
    append,
    edit_elsewhere,
    put_elsewhere,
    shot,
    stored_file,
    tab,
    write_elsewhere,
)
from tests.web.server import Serve


def test_two_tabs_edit_the_same_file_the_second_sees_the_conflict(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    first, second = signed_in(), signed_in()
    for page in (first, second):
        tab(page, "user")
    base = first.locator("#editor").input_value()
    first.fill("#editor", "FIRST TAB LINE\n" + base)
    first.click("#file-save")
    expect(first.locator("#file-version")).to_have_text("version 2")

    append(second, "\nSECOND TAB LINE")
    second.click("#file-save")
    conflict = second.locator("#conflict")
    expect(conflict).to_be_visible()
    expect(second.locator("#conflict-title")).to_have_text("USER.md changed while you were editing")
    expect(second.locator("#conflict-text")).to_contain_text(
        "You started from version 1; version 2 is stored now."
    )
    expect(second.locator("#file-state")).to_have_text("Conflict")
    # the newer content on the left, the user's text on the right, each differing line
    # marked as whose change it is
    stored = second.locator("[data-side=stored]")
    mine = second.locator("[data-side=mine]")
    expect(stored.filter(has_text="FIRST TAB LINE")).to_have_class("cell by-them")
    expect(mine.filter(has_text="SECOND TAB LINE")).to_have_class("cell by-you")
    assert "SECOND TAB LINE" not in stored.all_inner_texts()

    # reload-and-reapply: the edits touch different lines, so both survive
    second.click("#conflict-reapply")
    expect(conflict).to_be_hidden()
    expect(second.locator("#file-message")).to_contain_text(
        "Your edits were re-applied on top of version 2"
    )
    expect(second.locator("#kept")).to_be_visible()
    assert second.locator("#kept-text").input_value() == base + "\nSECOND TAB LINE"
    merged = second.locator("#editor").input_value()
    assert merged == "FIRST TAB LINE\n" + base + "\nSECOND TAB LINE"
    second.click("#file-save")
    expect(second.locator("#file-version")).to_have_text("version 3")
    assert stored_file(server, user, "user")["content"] == merged


def test_overlapping_edits_are_not_merged_and_no_text_is_lost(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    first, second = signed_in(), signed_in()
    for page in (first, second):
        tab(page, "soul")
    first.fill("#editor", "first tab's persona")
    first.click("#file-save")
    expect(first.locator("#file-version")).to_have_text("version 2")
    second.fill("#editor", "second tab's persona")
    second.click("#file-save")
    expect(second.locator("#conflict")).to_be_visible()
    second.click("#conflict-reapply")
    expect(second.locator("#file-message")).to_contain_text("change the same or neighbouring lines")
    second.click("#resolve-leave")  # no choice at the place: the two texts, to edit by hand
    assert second.locator("#editor").input_value() == "first tab's persona"
    assert second.locator("#kept-text").input_value() == "second tab's persona"
    # nothing to save in the editor, but the set-aside text is not saved: not "Saved"
    expect(second.locator("#file-state")).to_have_text("Earlier text not saved")
    expect(second.locator("#tab-soul")).to_have_class("unsaved")
    # the set-aside text is saved nowhere: dismissing it asks first, and "no" keeps it
    asked = answer_dialogs(second, [False, True])
    second.click("#kept-dismiss")
    expect(second.locator("#kept")).to_be_visible()
    assert second.locator("#kept-text").input_value() == "second tab's persona"
    second.click("#kept-dismiss")
    expect(second.locator("#kept")).to_be_hidden()
    expect(second.locator("#file-state")).to_have_text("Saved")
    assert (
        asked
        == ["Dismiss your earlier text of SOUL.md? It was not saved, and there is no undo."] * 2
    )


FIELDS = "# USER.md\n- Pronouns:\n- Time zone:\n"
ZONE_SET = "# USER.md\n- Pronouns:\n- Time zone: Europe/Paris\n"


def _reapplied_after_the_time_zone(
    signed_in: SignedIn, server: Serve, user: str, mine: str
) -> Page:
    """Two tabs on FIELDS: the first saves the time zone (version 3); the second saves
    ``mine``, gets the conflict and re-applies. The second tab, after that."""
    put_elsewhere(server, user, "user", FIELDS)
    first, second = signed_in(), signed_in()
    for page in (first, second):
        tab(page, "user")
    first.fill("#editor", ZONE_SET)
    first.click("#file-save")
    expect(first.locator("#file-version")).to_have_text("version 3")
    second.fill("#editor", mine)
    second.click("#file-save")
    expect(second.locator("#conflict")).to_be_visible()
    second.click("#conflict-reapply")
    return second


def test_filling_in_neighbouring_fields_is_re_applied(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    # One tab fills in "Time zone", the other "Pronouns" on the line above: each replaced a
    # line of its own, so the server's merge puts both in place (sandbox/merge.py).
    console.allow(409)
    mine = "# USER.md\n- Pronouns: she/her\n- Time zone:\n"
    second = _reapplied_after_the_time_zone(signed_in, server, user, mine)
    expect(second.locator("#file-message")).to_contain_text(
        "Your edits were re-applied on top of version 3."
    )
    assert second.locator("#editor").input_value() == (
        "# USER.md\n- Pronouns: she/her\n- Time zone: Europe/Paris\n"
    )


def test_edits_on_neighbouring_lines_are_said_to_be_neighbouring(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    # The server's merge conflicts on a line added right next to another edit (which goes
    # first is a guess) as well as on edits that overlap: one tab fills in "Time zone", the
    # other adds a line just above it.
    console.allow(409)
    mine = "# USER.md\n- Pronouns:\n- Pronunciation: AH-lee\n- Time zone:\n"
    second = _reapplied_after_the_time_zone(signed_in, server, user, mine)
    expect(second.locator("#file-message")).to_have_text(
        "Your edits and version 3 change the same or neighbouring lines, so they were not "
        "re-applied automatically: line 3 of version 3 (lines 3–4 of your text). Choose what "
        "to keep there below; the rest of your edits were re-applied."
    )
    shot(second, "neighbouring.png")
    second.click("#resolve-leave")
    assert second.locator("#editor").input_value() == ZONE_SET
    assert second.locator("#kept-text").input_value() == mine


def test_the_ctrl_s_hint_gives_way_to_the_choice_during_a_conflict(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "memory")
    message = page.locator("#file-message")
    expect(message).to_contain_text("Ctrl+S saves.")
    edit_elsewhere(server, user, "memory", lambda text: text + "\n- written by the platform")
    append(page, "\n- typed in the page")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    # Save is off until the user chooses: the quiet line says so instead of offering Ctrl+S
    during = (
        "Save is off until you choose below: re-apply your edits, overwrite, or copy your text."
    )
    expect(page.locator("#file-save")).to_be_disabled()
    expect(message).to_have_text(during)
    expect(message).to_have_class("banner quiet")
    shot(page, "conflict-hint.png")
    tab(page, "user")  # another file, no conflict: the usual hint
    expect(message).to_contain_text("Ctrl+S saves.")
    tab(page, "memory")  # back to the conflict
    expect(message).to_have_text(during)
    answer_dialogs(page, [True])  # Overwrite asks first (test_conflict_overwrite.py)
    page.click("#conflict-overwrite")
    expect(message).to_have_text("Saved MEMORY.md as version 3.")
    tab(page, "user")
    tab(page, "memory")  # resolved: Ctrl+S saves again, and the hint says so
    expect(message).to_contain_text("Ctrl+S saves.")


def test_a_rest_write_while_the_page_is_open_leads_to_the_conflict_view(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "memory")
    edit_elsewhere(server, user, "memory", lambda text: text + "\n- written by the platform")
    append(page, "\n- typed in the page")
    mine = page.locator("#editor").input_value()
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(
        page.locator("[data-side=stored]").filter(has_text="written by the platform")
    ).to_have_count(1)
    # overwrite knowingly: the user's text replaces version 2, and only version 2
    expect(page.locator("#conflict-overwrite")).to_have_text("Overwrite version 2 with my text")
    answer_dialogs(page, [True])  # Overwrite asks first (test_conflict_overwrite.py)
    page.click("#conflict-overwrite")
    expect(page.locator("#conflict")).to_be_hidden()
    expect(page.locator("#file-message")).to_have_text("Saved MEMORY.md as version 3.")
    assert page.locator("#editor").input_value() == mine
    stored = stored_file(server, user, "memory")
    assert (stored["version"], stored["content"]) == (3, mine)


def test_an_agent_write_while_the_page_is_open_leads_to_the_conflict_view(
    signed_in: SignedIn, server: Serve, console: Console, user: str, pg_url: str, tmp_path: Path
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "memory")
    # the agent runs elsewhere (its own runtime and sandbox) on the same database
    settings = Settings(
        environment="test",
        database_url=pg_url,
        data_dir=tmp_path / "agent",
        sandbox_root=tmp_path / "agent-sandboxes",
        jwt_secret="x" * 40,
    )
    mem = Memstrata.open(settings)
    try:

        async def agent_turn() -> str:
            session = await mem.open_agent_session(user, token_limit=32_000)
            result = await session.tools.call("record_memory", {"content": "Prefers tea"})
            await session.end_round()
            return str(result)

        # Playwright's sync API owns this thread's event loop: the agent gets its own thread.
        with ThreadPoolExecutor(1) as pool:
            assert "Recorded in MEMORY.md" in pool.submit(asyncio.run, agent_turn()).result()
    finally:
        mem.close()
    append(page, "\n- typed in the page")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("[data-side=stored]").filter(has_text="Prefers tea")).to_have_count(1)
    expect(page.locator("[data-side=mine]").filter(has_text="typed in the page")).to_have_count(1)


def _tab_written_elsewhere(
    signed_in: SignedIn,
    server: Serve,
    console: Console,
    user: str,
    name: str,
    first_line: str,
    **page_options: object,
) -> Page:
    """A signed-in page on file ``name``'s tab, the file then changed by another writer
    (``write_elsewhere``): the page's next save gets a 409."""
    console.allow(409)
    page = signed_in(**page_options)
    tab(page, name)
    write_elsewhere(server, user, name, first_line)
    return page


# Holds every PUT until the test calls window.__release(): a save that is slow to answer.
_HOLD_PUTS = """() => {
  const fetch = window.fetch;
  window.__release = null;
  window.fetch = async (url, init) => {
    if (init && init.method === "PUT") await new Promise((go) => { window.__release = go; });
    return fetch(url, init);
  };
}"""


def test_text_typed_while_a_save_is_in_flight_reaches_the_conflict_view(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    page = _tab_written_elsewhere(signed_in, server, console, user, "user", "WRITTEN ELSEWHERE")
    page.evaluate(_HOLD_PUTS)
    append(page, "\nTYPED BEFORE SAVE")
    page.click("#file-save")
    expect(page.locator("#file-state")).to_have_text("Saving…")
    page.wait_for_function("window.__release !== null")
    append(page, ", TYPED WHILE SAVING")  # the editor stays open while the save is out
    page.evaluate("window.__release()")
    expect(page.locator("#conflict")).to_be_visible()
    mine = page.locator("[data-side=mine]")
    expect(mine.filter(has_text="TYPED BEFORE SAVE, TYPED WHILE SAVING")).to_have_count(1)
    page.click("#conflict-reapply")
    expect(page.locator("#conflict")).to_be_hidden()
    merged = page.locator("#editor").input_value()
    assert merged.startswith("WRITTEN ELSEWHERE\n")
    assert merged.endswith("\nTYPED BEFORE SAVE, TYPED WHILE SAVING")
    assert page.locator("#kept-text").input_value().endswith(", TYPED WHILE SAVING")


def test_the_conflict_view_fits_a_phone_screen(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    page = _tab_written_elsewhere(
        signed_in, server, console, user, "memory", "- written by the agent", width=380
    )
    append(page, "\n- typed on the phone")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-reapply")).to_have_text("Reload version 2 and re-apply my edits")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the conflict view is {overflow}px wider than a 380px screen"
    for button in ("reapply", "overwrite", "copy"):
        box = page.locator(f"#conflict-{button}").bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 380, button


def test_a_resolved_conflict_once_saved_leaves_nothing_unsaved(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    page = _tab_written_elsewhere(signed_in, server, console, user, "user", "WRITTEN ELSEWHERE")
    append(page, "\n- typed in the page")
    page.click("#file-save")
    page.click("#conflict-reapply")
    expect(page.locator("#kept-title")).to_have_text("Your earlier text (not saved)")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 3.")
    # the set-aside text stays (until dismissed) for reference, no longer counted as unsaved
    expect(page.locator("#kept")).to_be_visible()
    dialogs: list[str] = []

    def dismiss(dialog: object) -> None:
        dialogs.append(dialog.type)  # type: ignore[attr-defined]
        dialog.dismiss()  # type: ignore[attr-defined]

    page.on("dialog", dismiss)
    page.click("#signout")
    expect(page.locator("#signin-view")).to_be_visible()
    assert dialogs == []
    expect(page.locator("#kept-title")).to_have_text("Your earlier text (for reference)")


def test_a_conflict_on_a_tab_left_meanwhile_is_announced(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    page = _tab_written_elsewhere(signed_in, server, console, user, "user", "WRITTEN ELSEWHERE")
    held: list[Route] = []
    page.route(
        "**/api/config/agent-files/user",
        lambda route: held.append(route) if route.request.method == "PUT" else route.continue_(),
    )
    append(page, "\nTYPED HERE")
    page.click("#file-save")
    page.click("#tab-soul")  # the user moves on while the save is out
    expect(page.locator("#file-version")).to_have_text("version 1")
    assert len(held) == 1
    held[0].continue_()
    message = page.locator("#file-message")
    expect(message).to_have_text(
        "USER.md was not saved: it was changed elsewhere meanwhile. Open the USER.md tab to "
        "compare both versions and choose which to keep."
    )
    expect(message).to_have_class("banner warn")
    expect(page.locator("#tab-user")).to_have_class("unsaved")
    page.click("#tab-user")
    expect(page.locator("#conflict")).to_be_visible()


def test_a_file_written_elsewhere_is_shown_when_its_tab_or_the_view_is_opened_again(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    tab(page, "user")
    expect(page.locator("#file-version")).to_have_text("version 1")
    message = page.locator("#file-message")
    # the agent rewrites USER.md while the page shows it: opening its tab again reads it
    put_elsewhere(server, user, "user", "# USER (the agent rewrote it)\n")
    tab(page, "memory")
    tab(page, "user")
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#editor")).to_have_value("# USER (the agent rewrote it)\n")
    expect(message).to_have_text(
        "USER.md was changed elsewhere (the agent or another tab): version 2 is shown."
    )
    expect(page.locator("#file-state")).to_have_text("Saved")
    # so does opening the files view again
    put_elsewhere(server, user, "user", "# USER (rewritten again)\n")
    page.click("#nav a[data-view=skills]")
    page.click("#nav a[data-view=files]")
    expect(page.locator("#file-version")).to_have_text("version 3")
    expect(page.locator("#editor")).to_have_value("# USER (rewritten again)\n")
    # a draft is never replaced: it keeps its version, the page says a newer one is stored,
    # and saving leads to the conflict view as before
    append(page, "MY DRAFT")
    put_elsewhere(server, user, "user", "# USER (a third time)\n")
    tab(page, "memory")
    tab(page, "user")
    expect(message).to_have_text(
        "USER.md was changed elsewhere: version 4 is stored now. Your unsaved text is kept; "
        "saving shows both versions to choose from."
    )
    expect(message).to_have_class("banner warn")
    expect(page.locator("#editor")).to_have_value("# USER (rewritten again)\nMY DRAFT")
    expect(page.locator("#file-version")).to_have_text("version 3")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    expect(page.locator("#conflict-left-title")).to_have_text("Saved by someone else · version 4")


def test_a_file_with_crlf_line_endings_keeps_them_when_edited_in_the_page(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    console.allow(409)
    page = signed_in()
    crlf = "# USER\r\n- line one\r\n- line two\r\n"
    assert put_elsewhere(server, user, "user", crlf) == 2
    page.reload()  # signed in from the tab's storage: the files are read again
    tab(page, "user")
    expect(page.locator("#file-version")).to_have_text("version 2")
    # unedited (the textarea shows LF), and the size is the stored size, CRs included
    expect(page.locator("#file-state")).to_have_text("Saved")
    expect(page.locator("#file-size")).to_have_attribute(
        "title", f"{len(crlf.encode())} of {MAX_CONTENT_BYTES:,} bytes (UTF-8)"
    )
    append(page, "x")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 3.")
    assert stored_file(server, user, "user")["content"] == crlf + "x"
    expect(page.locator("#file-state")).to_have_text("Saved")
    # the conflict path: merged onto a CRLF version written elsewhere, still CRLF
    put_elsewhere(server, user, "user", "ELSEWHERE\r\n" + crlf + "x")
    append(page, "y")
    page.click("#file-save")
    expect(page.locator("#conflict")).to_be_visible()
    page.click("#conflict-reapply")
    expect(page.locator("#file-message")).to_contain_text("Your edits were re-applied")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 5.")
    assert stored_file(server, user, "user")["content"] == "ELSEWHERE\r\n" + crlf + "xy"


def test_a_conflict_with_the_users_own_text_is_no_conflict(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    """A save whose answer was lost (a gateway's timeout, a restart) may have landed: the
    next save meets the user's own text at a newer version. It was shown as a conflict of
    two identical texts, every row "changed", with overwrite and re-apply to choose from."""
    console.allow(409)
    page = signed_in()
    tab(page, "memory")
    mine = page.locator("#editor").input_value() + "\n- the same line, typed twice"
    put_elsewhere(server, user, "memory", mine)  # stored as version 2 meanwhile
    page.fill("#editor", mine)
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(
        "MEMORY.md already holds your text: version 2."
    )
    expect(page.locator("#conflict")).to_be_hidden()
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Saved")
    assert page.locator("#editor").input_value() == mine
    assert stored_file(server, user, "memory")["version"] == 2  # nothing written again

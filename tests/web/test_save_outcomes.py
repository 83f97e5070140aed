"""What the page says a save came to when its answer is a gateway's timeout while the write
still runs on the server (a large first save is indexed for minutes), and what it says of
the user's own text found stored later: a save is said "saved" or "not saved" only once the
file says so, never from one early read-back."""

from __future__ import annotations

from dataclasses import dataclass

from playwright.sync_api import Page, Request, Route, expect

from tests.web.clock import pause_clock, says, step_until
from tests.web.conftest import Console, SignedIn, append, stored_file, tab
from tests.web.save_support import SAVED_LATE, next_save_is_no_conflict, on_put
from tests.web.server import Serve

CHECKING = (
    "The server had an error (HTTP 504 Gateway Timeout). USER.md may still be saving on the "
    "server: checking again for up to 2 minutes. Your text is still in the editor."
)
# the page's backoff: an immediate read-back, then one after each of its 8 waits
READS_IN_ALL = 9


class Gateway:
    """A gateway in front of the server that times out on every save of ``name`` (504) but
    has passed it on: ``land()`` is the server finishing that write, later."""

    def __init__(self, page: Page, server: Serve, user: str, name: str) -> None:
        self.server, self.user, self.name = server, user, name
        self.held: list[tuple[str, str]] = []
        on_put(page, name, self._time_out)

    def _time_out(self, route: Route) -> None:
        self.held.append((route.request.post_data or "", route.request.headers["if-match"]))
        route.fulfill(status=504, body="")

    def land(self) -> int:
        body, if_match = self.held.pop(0)
        with self.server.rest(self.user) as rest:
            written = rest.put(
                f"/api/config/agent-files/{self.name}",
                content=body,
                headers={"If-Match": if_match, "Content-Type": "application/json"},
            )
            written.raise_for_status()
            return int(written.json()["version"])


def _reads(page: Page, name: str) -> list[str]:
    """The page's reads of file ``name``, as they are sent."""
    seen: list[str] = []

    def on(request: Request) -> None:
        if request.method == "GET" and request.url.split("?")[0].endswith(f"/{name}"):
            seen.append(request.url)

    page.on("request", on)
    return seen


@dataclass(frozen=True)
class Checking:
    """A save of USER.md behind a :class:`Gateway`, the page checking whether it lands."""

    page: Page
    gateway: Gateway
    reads: list[str]  # the page's reads of USER.md from before the save on
    sent: str  # the editor's text as it was saved


def save_behind_gateway(
    signed_in: SignedIn,
    server: Serve,
    console: Console,
    user: str,
    text: str,
    *,
    paused: bool = False,
) -> Checking:
    """Append ``text`` to USER.md and save it through a gateway that times out (``paused``:
    the page's clock paused first), once the page says it is checking."""
    console.allow(504)
    page = signed_in()
    tab(page, "user")
    if paused:
        pause_clock(page)
    reads = _reads(page, "user")
    gateway = Gateway(page, server, user, "user")
    append(page, text)
    sent = page.locator("#editor").input_value()
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(CHECKING)
    return Checking(page, gateway, reads, sent)


def test_a_gateway_timeout_whose_write_lands_later_is_checked_until_it_is_saved(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    """The page used to read back once, find version 1 and say "Nothing was written … save
    again": saving again then met the user's own write as a 409."""
    saving = save_behind_gateway(signed_in, server, console, user, "\n- Likes oolong tea")
    page, mine = saving.page, saving.sent
    message = page.locator("#file-message")
    expect(message).to_have_class("banner warn")
    expect(page.locator("#file-state")).to_have_text("Checking save…")
    assert stored_file(server, user, "user")["version"] == 1
    assert saving.gateway.land() == 2  # the server finishes the write the gateway passed on
    expect(message).to_have_text(SAVED_LATE)
    expect(message).to_have_class("banner ok")
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Saved")
    assert page.locator("#editor").input_value() == mine
    next_save_is_no_conflict(page, server, user, mine)


def test_what_is_typed_while_checking_stays_unsaved_on_the_landed_version(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    saving = save_behind_gateway(signed_in, server, console, user, "\nSENT")
    page = saving.page
    append(page, "\nTYPED WHILE CHECKING")
    saving.gateway.land()
    expect(page.locator("#file-message")).to_have_text(
        f"{SAVED_LATE} What you typed since is not saved yet."
    )
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert page.locator("#editor").input_value().endswith("\nSENT\nTYPED WHILE CHECKING")


def test_checking_stops_after_two_minutes_and_says_the_file_is_unchanged(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    # The write never lands.
    saving = save_behind_gateway(signed_in, server, console, user, "\nLOST", paused=True)
    page, reads = saving.page, saving.reads
    message = page.locator("#file-message")
    given_up = "Not saved: USER.md is still version 1 after checking for 2 minutes."
    step_until(page, says(message, given_up))
    expect(message).to_have_text(
        f"The server had an error (HTTP 504 Gateway Timeout). {given_up} Your text is still "
        "in the editor; save again."
    )
    expect(message).to_have_class("banner error")
    assert len(reads) == READS_IN_ALL
    expect(page.locator("#file-state")).to_have_text("Unsaved changes")
    assert page.locator("#editor").input_value().endswith("\nLOST")
    # nothing more is read once the page has said so
    page.clock.fast_forward(600_000)
    page.wait_for_timeout(300)
    assert len(reads) == READS_IN_ALL


def test_saving_again_while_checking_stops_the_check(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    saving = save_behind_gateway(signed_in, server, console, user, "\nFIRST", paused=True)
    page, reads = saving.page, saving.reads
    assert len(reads) == 1
    saving.gateway.held.clear()
    page.unroute("**/api/config/agent-files/user")
    append(page, " AND SECOND")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 2.")
    page.clock.fast_forward(30_000)
    page.clock.fast_forward(30_000)
    page.wait_for_timeout(300)
    assert len(reads) == 1  # the first save's check was dropped with it
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 2.")
    assert stored_file(server, user, "user")["content"].endswith("\nFIRST AND SECOND")


def test_the_users_own_text_found_stored_on_reopening_the_tab_is_not_someone_elses(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    """A restart mid-save: the write landed, but its answer and every read-back were lost.
    Opening the file's tab again found version 2 and said "changed elsewhere … saving shows
    both versions" of what is the user's own text."""
    console.allow(503, text="net::ERR_FAILED")
    page = signed_in()
    tab(page, "user")
    pause_clock(page)
    down = [True]

    def restarting(route: Route) -> None:
        if route.request.method == "PUT":
            route.fetch()  # stored...
            route.abort()  # ...and the server went away before it answered
        elif down[0]:
            route.fulfill(status=503, body="")
        else:
            route.continue_()

    page.route("**/api/config/agent-files/user", restarting)
    append(page, "\nMINE")
    mine = page.locator("#editor").input_value()
    page.click("#file-save")
    message = page.locator("#file-message")
    unknown = "it may or may not have been saved"
    step_until(page, says(message, unknown))
    expect(message).to_contain_text(unknown)
    assert stored_file(server, user, "user")["version"] == 2
    down[0] = False  # the server is back
    tab(page, "soul")
    tab(page, "user")
    expect(message).to_have_text("USER.md already holds your text: version 2.")
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Saved")
    assert page.locator("#editor").input_value() == mine


def test_reopening_the_tab_while_checking_tells_the_save_at_once(
    signed_in: SignedIn, server: Serve, console: Console, user: str
) -> None:
    """The tab's own read of the file settles the check as the check's next read would,
    not as "changed elsewhere"."""
    # The clock paused: the check's next read waits, only the tab's read can tell.
    saving = save_behind_gateway(signed_in, server, console, user, "\nSENT", paused=True)
    page = saving.page
    saving.gateway.land()
    tab(page, "soul")
    tab(page, "user")
    expect(page.locator("#file-message")).to_have_text(SAVED_LATE)
    expect(page.locator("#file-state")).to_have_text("Saved")
    expect(page.locator("#conflict")).to_be_hidden()

"""The page's size of a stored file is the server's: the UTF-8 bytes of the text exactly
as stored, whatever its line breaks (CR LF, LF, a lone CR, a mix of them), and after an
edit the bytes of the text a save sends, which the server then stores.

The editor (a textarea) shows every line break as LF, and the page wrote back with CR LF a
file whose line breaks were CR LF and lone CRs: each lone CR became two bytes. A file the
server stored at its limit then read "Too large to save: 1 byte over the limit", unedited,
and one character typed over another turned Save off. And a file with CR LF and LF line
breaks was counted as if it had LF alone: the page said fewer bytes than the server held.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    SignedIn,
    append,
    put_elsewhere,
    stored_file,
    tab,
)
from tests.web.server import Serve

# Each a stored USER.md: its line breaks, and how the page saves it once edited.
STORED = {
    "crlf": ("# USER\r\n- one\r\n- two\r\n", "\r\n"),
    "lf": ("# USER\n- one\n- two\n", "\n"),
    "mixed": ("# USER\r\n- one\n- two\r\n", "\n"),
    "crlf-and-a-lone-cr": ("# USER\r\n- one\r- two\r\n", "\n"),
    "lone-crs": ("# USER\r- one\r- two\r", "\n"),
}


def size_title(page: Page) -> str:
    return str(page.locator("#file-size").get_attribute("title"))


def counted(n: int) -> str:
    return f"{n:,} of {MAX_CONTENT_BYTES:,} bytes (UTF-8)"


def opened(signed_in: SignedIn, server: Serve, user: str, content: str) -> Page:
    page = signed_in()
    assert put_elsewhere(server, user, "user", content) == 2
    page.reload()  # signed in from the tab's storage: the files are read again
    tab(page, "user")
    expect(page.locator("#file-version")).to_have_text("version 2")
    expect(page.locator("#file-state")).to_have_text("Saved")
    return page


@pytest.mark.parametrize("kind", list(STORED))
def test_the_size_is_the_stored_files_then_what_a_save_stores(
    signed_in: SignedIn, server: Serve, user: str, kind: str
) -> None:
    content, eol = STORED[kind]
    page = opened(signed_in, server, user, content)

    expect(page.locator("#file-size")).to_have_attribute("title", counted(len(content.encode())))
    append(page, "x")
    sends = content.replace("\r\n", "\n").replace("\r", "\n").replace("\n", eol) + "x"
    expect(page.locator("#file-size")).to_have_attribute("title", counted(len(sends.encode())))
    shown = size_title(page)
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 3.")
    stored = stored_file(server, user, "user")["content"]
    assert stored == sends and counted(len(stored.encode())) == shown


def test_a_file_stored_at_the_limit_is_not_over_it_in_the_page(
    signed_in: SignedIn, server: Serve, user: str
) -> None:
    head = "# USER\r\n- one\r- two\r\n"  # a lone CR among CR LF line breaks
    content = head + "y" * (MAX_CONTENT_BYTES - len(head))
    assert len(content.encode()) == MAX_CONTENT_BYTES  # the server took it
    page = opened(signed_in, server, user, content)

    expect(page.locator("#file-size")).to_have_attribute("title", counted(MAX_CONTENT_BYTES))
    expect(page.locator("#file-warning")).to_be_hidden()
    # one character typed over another: the same size to the server, so Save is on
    page.locator("#editor").press("Control+End")
    page.locator("#editor").press("Backspace")
    page.locator("#editor").press_sequentially("z")
    expect(page.locator("#file-warning")).to_be_hidden()
    expect(page.locator("#file-save")).to_be_enabled()
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved USER.md as version 3.")
    stored = stored_file(server, user, "user")["content"]
    assert len(stored.encode()) <= MAX_CONTENT_BYTES and stored.endswith("yz")

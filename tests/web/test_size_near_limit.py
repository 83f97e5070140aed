"""The size beside the meter near the server's limit, the one state message beside the
"Too large to save" warning, and a save refused by the request limit naming it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    Console,
    OpenPage,
    SignedIn,
    append,
    sign_in,
    tab,
)
from tests.web.server import Serve

TIGHT = 32 * 1024


def test_a_size_near_the_limit_is_in_exact_bytes(signed_in: SignedIn) -> None:
    """In KiB, 6 bytes under the limit read "64 KiB of 64 KiB", as the limit itself did."""
    page = signed_in()
    tab(page, "memory")
    size = page.locator("#file-size")
    for n in (MAX_CONTENT_BYTES - 6, MAX_CONTENT_BYTES, MAX_CONTENT_BYTES + 6):
        page.fill("#editor", "x" * n)
        expect(size).to_have_text(f"{n:,} of {MAX_CONTENT_BYTES:,} bytes")
    page.fill("#editor", "x" * 1000)
    expect(size).to_have_text("1,000 B of 64 KiB")
    page.fill("#editor", "x" * (MAX_CONTENT_BYTES - 2048))
    expect(size).to_have_text("62 KiB of 64 KiB")


def test_a_saved_message_does_not_stay_beside_too_large_to_save(signed_in: SignedIn) -> None:
    page = signed_in()
    tab(page, "user")
    append(page, "\n- Likes oolong tea")
    page.click("#file-save")
    message = page.locator("#file-message")
    expect(message).to_have_text("Saved USER.md as version 2.")
    page.fill("#editor", "x" * (MAX_CONTENT_BYTES + 1))
    expect(page.locator("#file-warning")).to_have_text(
        "Too large to save: 1 byte over the limit. Shorten the file; Save is off until it fits."
    )
    expect(message).to_be_hidden()
    expect(page.locator("#files-view .banner:visible")).to_have_count(1)
    # back under the limit: the quiet hint, not the old "Saved"
    page.locator("#editor").press("Control+End")
    page.locator("#editor").press("Backspace")
    expect(message).to_contain_text("Ctrl+S saves.")


@pytest.fixture(scope="module")
def tight_server(
    chromium: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Serve]:
    """Files up to the request limit: a file under it whose request is over it (its JSON
    escapes) is refused by the request limit, not the file limit."""
    serve = Serve(
        tmp_path_factory.mktemp("web-tight"),
        {
            "MEMSTRATA_DATABASE_URL": pg_url,
            "MEMSTRATA_MAX_CONTENT_BYTES": str(TIGHT),
            "MEMSTRATA_MAX_REQUEST_BYTES": str(TIGHT),
        },
    )
    serve.start()
    yield serve
    serve.stop()


def test_a_request_over_the_servers_limit_says_the_limit(
    open_page: OpenPage, tight_server: Serve, console: Console, user: str
) -> None:
    console.allow(413)
    page = open_page(on=tight_server)
    sign_in(page, tight_server.token(user))
    tab(page, "memory")
    # under the file limit; each quote is two bytes of the request's JSON
    page.fill("#editor", '"' * (TIGHT - 1000))
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(
        f"MEMORY.md could not be sent: the request is over the server's limit of {TIGHT:,} "
        "bytes (a request is a little larger than the file it carries). Shorten the file and "
        "save again. Nothing was written; your text is still in the editor."
    )

"""The size beside the meter near the server's limit, the one state message beside the
"Too large to save" warning, and a file at the limit saved whatever its JSON escapes take,
from the page and the API (the PUT's body limit is the JSON of a file at the file limit,
every byte escaped; the content is measured decoded)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from memstrata.config import FILE_BODY_ROOM, JSON_ESCAPE_BYTES
from tests.web.conftest import (
    MAX_CONTENT_BYTES,
    Console,
    OpenPage,
    SignedIn,
    append,
    sign_in,
    stored_file,
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
    """Files up to the request limit, so that a file at the limit has a request over it
    (its JSON escapes): the file's PUT must take it all the same."""
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


def test_a_file_at_the_limit_of_quotes_saves_from_the_page(
    open_page: OpenPage, tight_server: Serve, console: Console, user: str
) -> None:
    """Each quote is two bytes of the request's JSON: the body is twice the request limit.
    It was refused 413 "over the server's limit", a file the meter said fits."""
    page = open_page(on=tight_server)
    sign_in(page, tight_server.token(user))
    tab(page, "memory")
    page.fill("#editor", '"' * TIGHT)
    expect(page.locator("#file-size")).to_have_text(f"{TIGHT:,} of {TIGHT:,} bytes")
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text("Saved MEMORY.md as version 2.")
    assert stored_file(tight_server, user, "memory")["content"] == '"' * TIGHT


@pytest.mark.parametrize(
    ("char", "escaped"), [('"', 2), ("\\", 2), ("\x01", JSON_ESCAPE_BYTES), ("\u00e9", 6)]
)
def test_a_file_at_the_limit_saves_through_the_api_however_escaped(
    tight_server: Serve, user: str, char: str, escaped: int
) -> None:
    """Python's json escapes é as \\u00e9 (6 bytes for its 2 of UTF-8); a control
    character is the worst case, 6 bytes for 1."""
    content = char * (TIGHT // len(char.encode()))
    assert len(content.encode()) == TIGHT
    body = json.dumps({"content": content, "expected_version": 1}).encode()
    assert len(body) > TIGHT * (escaped // len(char.encode()))  # over the request limit too
    with tight_server.rest(user) as rest:
        assert rest.get("/api/config/agent-files/memory").status_code == 200
        saved = rest.put(
            "/api/config/agent-files/memory",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert (saved.status_code, saved.json()["version"]) == (200, 2), saved.text
    assert stored_file(tight_server, user, "memory")["content"] == content


def test_content_over_the_file_limit_is_refused_as_the_file_decoded(
    tight_server: Serve, user: str
) -> None:
    """The file limit is the content's, decoded; the body limit is the worst-case JSON of a
    file at that limit, and a body past it is the request limit's 413."""
    with tight_server.rest(user) as rest:
        over = rest.put("/api/config/agent-files/memory", json={"content": '"' * (TIGHT + 1)})
        assert over.status_code == 413
        assert over.json()["detail"].startswith(
            f"content is {TIGHT + 1} bytes, over the limit of {TIGHT} bytes"
        )
        bound = JSON_ESCAPE_BYTES * TIGHT + FILE_BODY_ROOM
        huge = b'{"content": "' + b"x" * bound + b'"}'
        past = rest.put(
            "/api/config/agent-files/memory",
            content=huge,
            headers={"Content-Type": "application/json"},
        )
        assert past.status_code == 413
        assert f"over the limit of {bound} bytes" in past.json()["detail"]
    assert stored_file(tight_server, user, "memory")["version"] == 1


def test_a_request_refused_by_a_limit_on_the_way_says_that_limit(
    signed_in: SignedIn, console: Console
) -> None:
    """memstrata itself takes a file at its limit however escaped; a 413 for a file under
    it comes from a limit on the way (a gateway's, given in the API's words here), and the
    page names that limit."""
    console.allow(413)
    page = signed_in()
    tab(page, "memory")
    detail = (
        "request body is 70000 bytes, over the limit of 65536 bytes (send a smaller body; "
        "an operator can raise MEMSTRATA_MAX_REQUEST_BYTES)"
    )
    body = {"code": "payload_too_large", "detail": detail, "message": detail}
    page.route(
        "**/api/config/agent-files/memory",
        lambda route: (
            route.fulfill(status=413, json=body)
            if route.request.method == "PUT"
            else route.continue_()
        ),
    )
    page.fill("#editor", '"' * 30_000)
    page.click("#file-save")
    expect(page.locator("#file-message")).to_have_text(
        "MEMORY.md could not be sent: the request is over the server's limit of 65,536 bytes "
        "(a request is a little larger than the file it carries). Shorten the file and save "
        "again. Nothing was written; your text is still in the editor."
    )

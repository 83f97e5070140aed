"""The search view says when no hit is a keyword match: RRF has no floor, so a query that no
passage shares a word with is still answered with the nearest vectors, however far."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import expect

from tests.web.conftest import SignedIn
from tests.web.server import Serve
from tests.web.test_skills_search import _hybrid_search, _search, add_to_user_md

LOOSE_ONLY = (
    "No close matches: none of these hits is a keyword match for your search, so they are "
    "only the nearest in meaning and may be unrelated."
)
NONSENSE = "zqxv wubblefrotz"
# WEB_TEST_SHOTS=<dir>: save what this test checks to look at (nothing is saved without it)
SHOTS = os.environ.get("WEB_TEST_SHOTS")


def test_hits_from_the_vectors_alone_are_said_to_be_no_close_match(
    signed_in: SignedIn, hybrid_server: Serve, user: str
) -> None:
    with hybrid_server.rest(user) as rest:
        add_to_user_md(rest, "- Keeps bees on the roof of the flat in Lyon.")
        add_to_user_md(rest, "- Plays the cello on Sunday mornings.")
        loose = _hybrid_search(rest, NONSENSE)
        close = _hybrid_search(rest, "bees roof")
    # What the page is shown: hits all the same, none of them found by BM25.
    assert loose["hits"] and all(h["explain"]["bm25_rank"] is None for h in loose["hits"])
    assert any(h["explain"]["bm25_rank"] is not None for h in close["hits"])

    page = signed_in(on=hybrid_server)
    _search(page, NONSENSE)
    message = page.locator("#search-message")
    expect(message).to_have_text(LOOSE_ONLY)
    expect(message).to_have_class("banner info")
    expect(page.locator(".hit")).to_have_count(len(loose["hits"]))  # shown, not hidden
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / "search-no-close-match.png"), full_page=True)

    _search(page, "bees roof")  # a keyword match: nothing to say
    expect(page.locator(".hit").first).to_contain_text("Keeps bees")
    expect(message).to_be_hidden()

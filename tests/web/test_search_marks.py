"""A search hit marks the words its query has (`<mark>`), where the server's answer says
(``"marks": true``; the BM25 side's rule, ``retrieval.hit_marks``): English words
case-folded and lightly stemmed, stop words never; Chinese by the pairs the query has, or a
character the query has alone. Built as text (markup in a hit stays text), named for a
screen reader, and a hit's lines wrap as they would without the marks."""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.web.conftest import SignedIn, shot
from tests.web.server import Serve
from tests.web.test_skills_search import _search, add_to_user_md

BEES = "- Keeps bees on the ROOF of the flat in Lyon; the bee-keeping started in 2019."
TEA = "- 每天早上喝一杯乌龙茶，茶叶来自福建。"
LONG_WORD = "pneumonoultramicroscopicsilicovolcanoconiosis" * 3  # wider than a phone
LONG = f"- A {LONG_WORD.title()} is a long word, {LONG_WORD} twice."
MARKUP = '- Pasted <img src=x onerror="window.hacked=1"> into the notes.'
WORLD = "- 👍 İşte ＧＰＴ４ notes: ข้าวผัด อร่อยมาก"
MARKS = "e => [...e.querySelectorAll('mark')].map((m) => m.textContent)"


def _hit(page: Page, text: str) -> Locator:
    hit = page.locator(".hit-text").filter(has_text=text)
    expect(hit).to_have_count(1)
    return hit


@pytest.fixture
def page(signed_in: SignedIn, server: Serve, user: str) -> Page:
    with server.rest(user) as rest:
        for line in (BEES, TEA, LONG, MARKUP, WORLD):
            add_to_user_md(rest, line)
    return signed_in()


def test_the_query_s_words_are_marked_as_the_bm25_side_matches_them(page: Page) -> None:
    # case-folded, "keeping"/"keeps" both "keep", "bees" and "bee" one term; "the" and "in"
    # are stop words, never marked
    _search(page, "the Roof keeping bees in")
    hit = _hit(page, "Keeps bees")
    assert hit.evaluate(MARKS) == ["Keeps", "bees", "ROOF", "bee", "keeping"]
    expect(hit).to_contain_text(BEES.removeprefix("- "))  # the text itself unchanged
    shot(page, "search-marks.png")

    _search(page, "乌龙茶")  # the pairs 乌龙 and 龙茶: not the 茶 of 茶叶 alone
    assert _hit(page, "乌龙茶").evaluate(MARKS) == ["乌龙茶"]
    _search(page, "茶")  # a character alone in the query: every one
    assert _hit(page, "乌龙茶").evaluate(MARKS) == ["茶", "茶"]


def test_a_mark_is_text_and_is_named_for_a_screen_reader(page: Page) -> None:
    _search(page, "img onerror")
    hit = _hit(page, "Pasted")
    assert hit.evaluate(MARKS) == ["img", "onerror"]
    assert hit.evaluate("e => e.querySelectorAll('img').length") == 0
    assert page.evaluate("() => window.hacked") is None
    expect(hit).to_contain_text(MARKUP.removeprefix("- "))
    # the role alone is read out by few screen readers: the mark says what it is
    marks = [line.strip() for line in hit.aria_snapshot().splitlines() if "- mark:" in line]
    assert marks == ['- mark: "match: img"', '- mark: "match: onerror"']
    # and a copy of the text is the text, without those words
    assert "match" not in hit.evaluate("e => e.innerText")


def test_marks_leave_a_hit_s_lines_as_they_were_at_phone_width(page: Page) -> None:
    page.set_viewport_size({"width": 360, "height": 760})
    _search(page, f"{LONG_WORD} word")
    hit = _hit(page, "is a long word")
    assert hit.evaluate(MARKS) == [LONG_WORD.title(), "word", LONG_WORD]
    # the same text without marks, beside it: as tall and as wide (the marks add no width)
    sizes = hit.evaluate(
        """e => {
          const plain = e.cloneNode(false);
          plain.textContent = e.textContent;
          e.after(plain);
          const size = (n) => [n.scrollHeight, n.scrollWidth, n.clientWidth];
          const both = [size(e), size(plain)];
          plain.remove();
          return both;
        }"""
    )
    assert sizes[0] == sizes[1], sizes
    assert sizes[0][1] <= sizes[0][2], "the hit's text scrolls sideways"
    assert page.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
    hit.locator("mark").first.scroll_into_view_if_needed()
    shot(page, "search-marks-phone.png")


def test_the_page_draws_the_server_s_marks(page: Page) -> None:
    # NFKC, Turkish İ, Thai cluster pairs and an emoji before them: the page slices the
    # text by the answer's UTF-16 offsets, applying no rule of its own
    with page.expect_response("**/api/memory/search") as answer:
        _search(page, "işte gpt4 ข้าว")
    assert answer.value.request.post_data_json["marks"] is True
    [served] = [h for h in answer.value.json()["hits"] if "İşte" in h["text"]]
    hit = _hit(page, "İşte")
    drawn = hit.evaluate(MARKS)
    assert drawn == ["İşte", "ＧＰＴ４", "ข้าว"]
    units = served["text"].encode("utf-16-le")
    assert drawn == [units[2 * s : 2 * e].decode("utf-16-le") for s, e in served["marks"]]

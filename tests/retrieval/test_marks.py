"""``retrieval.hit_marks``: the stretches of a hit to mark come from the BM25 tokenizer
itself, in UTF-16 offsets a page slices its text with."""

from __future__ import annotations

from memstrata.retrieval.hit_marks import hit_marks, mark_terms, marks


def marked(text: str, query: str) -> list[str]:
    """The marked stretches as text, sliced by UTF-16 offsets as a page does."""
    units = text.encode("utf-16-le")
    return [units[2 * s : 2 * e].decode("utf-16-le") for s, e in hit_marks(text, query)]


def test_english_words_by_case_folding_stems_and_stop_words() -> None:
    text = "Keeps bees on the ROOF of the flat in Lyon; the bee-keeping started in 2019."
    assert marked(text, "the Roof keeping bees in") == ["Keeps", "bees", "ROOF", "bee", "keeping"]
    assert hit_marks(text, "the Roof keeping bees in")[:2] == [(0, 5), (6, 10)]
    # a query of stop words alone marks nothing
    assert hit_marks(text, "the of in") == []
    # nor does a hit that shares no term (found by vectors)
    assert hit_marks(text, "chess") == []


def test_words_split_at_apostrophes_underscores_and_digits_as_indexed() -> None:
    assert marked("don't snake_case 3.14", "case 14") == ["case", "14"]


def test_chinese_by_the_query_s_pairs_or_a_character_searched_alone() -> None:
    tea = "每天早上喝一杯乌龙茶，茶叶来自福建。"
    # the pairs 乌龙 and 龙茶: one mark, not the 茶 of 茶叶 alone
    assert marked(tea, "乌龙茶") == ["乌龙茶"]
    assert marked(tea, "茶") == ["茶", "茶"]
    # alone in the query beside a pair: every one of it
    assert marked(tea, "茶 乌龙") == ["乌龙茶", "茶"]
    # a single character the query shares inside its own pairs marks nothing
    assert marked(tea, "红茶") == []


def test_nfkc_and_turkish_dotted_capital_i() -> None:
    assert marked("ＧＰＴ４ and Fußball", "gpt4 FUSSBALL") == ["ＧＰＴ４", "Fußball"]
    assert marked("İşte burada", "işte") == ["İşte"]
    assert marked("ΣΊΣΥΦΟΣ", "σίσυφος") == ["ΣΊΣΥΦΟΣ"]


def test_offsets_are_utf16_code_units_past_emoji() -> None:
    text = "I 👍 love tea 🍵 and more tea"
    assert hit_marks(text, "tea") == [(10, 13), (26, 29)]  # 👍 and 🍵 are two units each
    assert marked(text, "tea") == ["tea", "tea"]
    assert marked("👨‍👩‍👧 family", "family") == ["family"]


def test_a_combining_mark_belongs_to_its_word() -> None:
    text = "cafe\u0301 au lait"  # e + COMBINING ACUTE, NFKC composes it
    assert hit_marks(text, "café") == [(0, 5)]
    assert marked("हिन्दी भाषा", "हिन्दी") == ["हिन्दी"]
    assert marked("hy\u00adphen here", "hyphen") == ["hy\u00adphen"]


def test_thai_by_its_cluster_pairs() -> None:
    assert marked("ข้าวผัด อร่อยมาก", "ข้าว") == ["ข้าว"]
    assert marked("ข้าวผัด อร่อยมาก", "อร่อย") == ["อร่อย"]


def test_one_query_s_terms_serve_every_hit() -> None:
    terms = mark_terms("bees")
    assert marks("bees here", terms) == [(0, 4)]
    assert marks("a bee", terms) == [(2, 5)]
    assert marks("", terms) == []


def test_a_run_read_for_one_query_marks_by_another_s_terms() -> None:
    # runs are remembered across queries: what is remembered must not depend on the query
    assert hit_marks("bees here, honey", "bees") == [(0, 4)]
    assert hit_marks("bees here, honey", "honey bee") == [(0, 4), (11, 16)]
    assert hit_marks("bees here, honey", "here") == []  # a stop word
    assert hit_marks("乌龙茶 bees", "龙茶") == [(1, 3)]
    assert hit_marks("乌龙茶 bees", "乌") == [(0, 1)]

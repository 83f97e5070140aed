"""``memory_search``'s hit preview: it shows the matching text whatever its script or
normalisation, and never cuts a grapheme cluster (the lines of a long hit that hold the
query's rare terms: ``test_preview_lines.py``)."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime

import pytest
import regex

from memstrata.agent.answers import format_hit
from memstrata.agent.preview import HIT_PREVIEW_CHARS, term_spots
from memstrata.retrieval.ranking import SearchHit

FAMILY = "👨\u200d👩\u200d👧\u200d👦"
FLAG = "🇨🇳"


def hit(text: str) -> SearchHit:
    return SearchHit(
        text=text,
        file_path="MEMORY.md",
        chunk_index=0,
        source="memory",
        created_at=datetime(2026, 3, 1, tzinfo=UTC),
        source_ids=(),
        score=0.5,
        explain={},
    )


def preview(text: str, query: str) -> str:
    line = format_hit(1, hit(text), query)
    prefix = "1. [MEMORY.md · 2026-03-01 · score 0.500] "
    assert line.startswith(prefix)
    return line.removeprefix(prefix)


def window(shown: str) -> str:
    return shown.removeprefix("…").removesuffix("…")


def clusters(text: str) -> list[str]:
    return regex.findall(r"\X", text)


@pytest.mark.parametrize(
    ("text", "query", "wanted"),
    [
        # Case folding lengthens ß: positions in a folded copy ran past the match.
        ("Straße " * 120 + "Der Hund heißt Bello." + " x" * 300, "Bello", "Bello"),
        ("İSTİKLAL İÇİN " * 120 + "Mein Bruder wohnt in Izmir." + " x" * 300, "izmir", "Izmir"),
        # BM25 matched these under NFKC; the raw text holds another spelling.
        (
            "filler line. " * 40 + "模型是ＧＰＴ４ｏ，用于翻译。" + " more" * 80,
            "GPT4o",
            "ＧＰＴ４ｏ",
        ),
        (
            unicodedata.normalize("NFD", "filler words. " * 40 + "Amélie aime le café.")
            + " x" * 200,
            "café",
            unicodedata.normalize("NFD", "café"),
        ),
        # \w+ split Hindi at its vowel signs and anchored on the first स anywhere.
        ("भारत " * 100 + "मुझे हिन्दी संगीत पसंद है" + " और" * 100, "संगीत", "संगीत"),
        # A lone character of a CJK query turns up anywhere; its pair where the hit is.
        ("乌" + "，天气很好。" * 80 + "我喜欢喝乌龙茶。" + "。" * 300, "乌龙茶", "乌龙茶"),
        # The tokenizer drops a soft hyphen inside a word, and so does the match.
        (
            "Vertrag " * 80 + "Versicherungs\u00adgesellschaft zahlt." + " x" * 300,
            "Versicherungsgesellschaft",
            "Versicherungs\u00adgesellschaft",
        ),
    ],
)
def test_the_preview_shows_the_matching_text(text: str, query: str, wanted: str) -> None:
    shown = preview(text, query)
    assert wanted in shown
    assert len(shown) <= HIT_PREVIEW_CHARS


def test_the_rarest_term_sits_a_quarter_into_the_window() -> None:
    # "cat" is everywhere, "miso" once: the window is on Miso, not on the first cat.
    text = "cat " + "word " * 200 + "Miso the cat" + " tail cat" * 100
    shown = preview(text, "cat Miso")
    room = HIT_PREVIEW_CHARS - 2  # the two markers are within the bound
    start = 1004 - room // 4
    assert shown == "…" + text[start : start + room] + "…"


def test_term_spots_index_the_original_text() -> None:
    text = "ẞ ß ﬁ İ " * 30 + "Bello parties"
    assert [text[at:] for at in term_spots(text, frozenset({"bello"}))["bello"]] == [
        "Bello parties"
    ]
    assert text[term_spots(text, frozenset({"party"}))["party"][0] :] == "parties"  # the stem
    assert term_spots(text, frozenset({"zzz"})) == {}


def test_a_hit_without_a_query_term_shows_its_beginning() -> None:
    text = "vector neighbours only " * 40  # found by the embedding, no word of the query
    shown = preview(text, "the and zzz")  # stopwords and a word it lacks
    assert shown == text[: HIT_PREVIEW_CHARS - 2] + "…"  # room kept for a marker each side


@pytest.mark.parametrize(
    "text",
    [
        FAMILY * 100 + " target " + FLAG * 200,
        "e\u0301" * 300 + " target " + "क्षत्रि" * 100,
        "👋🏽" * 300
        + " target "
        + "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f" * 60,
    ],
)
def test_the_window_never_cuts_a_grapheme_cluster(text: str) -> None:
    shown = preview(text, "target")
    assert "target" in shown
    assert len(shown) <= HIT_PREVIEW_CHARS
    assert set(clusters(window(shown))) <= set(clusters(text))

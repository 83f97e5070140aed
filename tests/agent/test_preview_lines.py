"""The preview of a long hit shows the lines holding the query's rare terms: a MEMORY.md
chunk of some 25 near-identical bullets showed its first "lives" bullet, not the one that
named the colleague asked about (the agent review's M2)."""

from __future__ import annotations

import random

import pytest
import regex

from memstrata.agent.preview import ELIDED, HIT_PREVIEW_CHARS, pick, preview

NAMES = ["Carla", "Giulia", "Sven", "Bob", "Noor", "Rosa", "Viktor", "Ines", "Mei", "Wen"]
CITIES = ["Riga", "Lima", "Osaka", "Porto", "Seoul", "Quito", "Warsaw", "Paris"]
FAMILY = "👨\u200d👩\u200d👧"


def colleagues(count: int = 25) -> list[str]:
    """A long-lived user's MEMORY.md chunk: a heading and one bullet per colleague."""
    bullets = [
        f"- 2026-12-05: The user's colleague {NAMES[i % 10]}{i} lives in {CITIES[i % 8]}."
        for i in range(count)
    ]
    return ["## Ongoing", *bullets]


def pieces(shown: str) -> list[str]:
    """What the preview shows, without its markers."""
    return [p.strip() for p in shown.split(ELIDED) if p.strip()]


def test_the_rare_term_far_down_the_chunk_is_shown() -> None:
    lines = colleagues()
    shown = preview("\n".join(lines), "Where does Wen19 live?")
    assert shown == f"{ELIDED} {lines[20]} {ELIDED}"  # bullet 19, after the heading
    assert "Wen19 lives in Porto" in shown


def test_lines_holding_rare_terms_are_shown_in_their_order() -> None:
    lines = colleagues()
    lines[5] = "- 2026-12-05: Project Kestrel-18 🚀 ships in sprint 1."
    lines[22] = "- 2026-12-05: Project Kestrel-178 🚀 ships in sprint 8."
    lines[12] = "- 2026-12-05: Project Tern-13 🚀 ships in sprint 4."
    shown = preview("\n".join(lines), "When does project Kestrel-18 ship?")
    # Kestrel-18's line, then Kestrel-178's (kestrel is rare too); Tern's only says project.
    assert shown == f"{ELIDED} {lines[5]} {ELIDED} {lines[22]} {ELIDED}"


def test_adjacent_lines_are_joined_without_a_marker() -> None:
    lines = colleagues()
    lines[3] = "- Dog: Rex, a beagle"
    lines[4] = "- Dog food: Rex eats salmon"
    shown = preview("\n".join(lines), "dog Rex")
    assert shown == f"{ELIDED} {lines[3]} {lines[4]} {ELIDED}"


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("王芳的生日是哪天？", "王芳的生日是5月5日。"),  # the pair 王芳, not 的 or 生日
        ("吴琳29的生日", "吴琳29的生日是12月20日。"),
        ("ＧＰＴ４ｏ", "模型是GPT4o，用于翻译。"),  # NFKC, as the search reads it
        ("parties", "去了 Party 派对。"),  # stemmed and case-folded: party
    ],
)
def test_chinese_and_english_match_as_the_search_reads_them(query: str, wanted: str) -> None:
    names = ["张伟", "李娜", "刘洋", "陈静", "杨勇", "赵敏", "黄磊"]
    lines = [
        f"- 2026-12-05: {names[i % 7]}{i}的生日是{i % 12 + 1}月{i % 28 + 1}日。" for i in range(30)
    ]
    lines[17] = f"- 2026-12-05: {wanted}"
    shown = preview("\n".join(lines), query)
    assert pieces(shown) == [lines[17]]


def test_a_long_best_line_is_cut_around_its_rare_term_between_clusters() -> None:
    long_line = f"Family notes {FAMILY} " * 40 + "the cabin code is 4711 " + f"{FAMILY} more " * 60
    text = "\n".join([*colleagues(3), long_line, *colleagues(3)])
    for query in ("cabin code", "family cabin code 4711"):
        shown = preview(text, query)
        assert len(shown) <= HIT_PREVIEW_CHARS
        assert "the cabin code is 4711" in shown
        assert shown.startswith(ELIDED) and shown.endswith(ELIDED)
        assert set(regex.findall(r"\X", shown[1:-1])) <= set(regex.findall(r"\X", text))


@pytest.mark.parametrize("limit", [40, 120, HIT_PREVIEW_CHARS])
def test_the_bound_holds_and_only_the_texts_own_pieces_are_shown(limit: int) -> None:
    rng = random.Random(limit)
    words = ["lives", "Riga", "Wen19", "王芳", "生日", FAMILY, "🇨🇳", "e\u0301", "party", "x" * 70]
    for _ in range(200):
        lines = [
            " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
            for _ in range(rng.randint(1, 12))
        ]
        text = "\n".join(lines)
        flat = " ".join(text.split())
        shown = preview(text, " ".join(rng.sample(words, 3)), limit)
        assert len(shown) <= limit or shown == flat
        for piece in pieces(shown):
            assert piece in flat
            assert set(regex.findall(r"\X", piece)) <= set(regex.findall(r"\X", flat))


def test_pick_keeps_lines_scoring_half_the_best_while_they_fit() -> None:
    # scores: the best (line 2), one at half of it (line 0), one below half (line 3).
    assert pick([1.0, 0.0, 2.0, 0.9], [10, 10, 10, 10], 100) == [0, 2]
    assert pick([1.0, 0.0, 2.0, 0.9], [10, 10, 10, 10], 14) == [2]  # "… line …"

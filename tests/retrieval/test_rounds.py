"""Conversation rows carry the previous round as context; re-indexing keeps it fresh."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import regex
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import tail_within
from memstrata.retrieval.staging import StagedIndex
from memstrata.retrieval.tokenize import count_tokens

WHEN = datetime(2026, 11, 1, tzinfo=UTC)


def stored(db: Database, user: str = "u") -> dict[str, tuple[str, object, object]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT file_path, chunk_text, source_ids, context FROM memory_embeddings "
                "WHERE user_id = :u ORDER BY file_path, chunk_index"
            ),
            {"u": user},
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}


def test_round_starts_with_previous_round(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "Did you paint that?", "", WHEN, ["D1:1"])
    indexer.index_turn("u", "s", 1, "Yes, the lake sunrise last year.", "", WHEN, ["D1:2"])
    body, ids, context = stored(db)["sessions/s/1"]
    assert body == "User: Did you paint that?\nUser: Yes, the lake sunrise last year."
    assert ids == ["D1:2"]
    assert context == {"chars": len("User: Did you paint that?\n"), "source_ids": ["D1:1"]}
    assert stored(db)["sessions/s/0"][2] is None  # the first round has no context


def test_batch_and_out_of_order_rounds_get_the_same_context(db: Database) -> None:
    from memstrata.retrieval.indexer import Round

    indexer = Indexer(db.sessions, None)
    indexer.index_rounds("a", [Round("s", 1, "second", ""), Round("s", 0, "first", "")])
    indexer.index_turn("b", "s", 1, "second")  # the next round arrives first
    indexer.index_turn("b", "s", 0, "first")  # ... and the previous one re-contexts it
    assert stored(db, "a")["sessions/s/1"][0] == stored(db, "b")["sessions/s/1"][0]
    assert stored(db, "b")["sessions/s/1"][0] == "User: first\nUser: second"


def test_reindexing_a_round_refreshes_the_next_rounds_context(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "I live in Lisbon", "", WHEN)
    indexer.index_turn("u", "s", 1, "Nice city", "", WHEN)
    reports = indexer.index_rounds("u", [])  # nothing to do
    assert reports == []
    report = indexer.index_turn("u", "s", 0, "I live in Porto", "", WHEN)
    assert report.inserted == 1
    body, ids, context = stored(db)["sessions/s/1"]
    assert body == "User: I live in Porto\nUser: Nice city"
    assert ids == ["s:1"] and context == {"chars": 22, "source_ids": ["s:0"]}


def test_sessions_do_not_share_context_and_zero_disables_it(db: Database) -> None:
    Indexer(db.sessions, None).index_turn("u", "a", 0, "in session a")
    Indexer(db.sessions, None).index_turn("u", "b", 1, "in session b")
    assert stored(db)["sessions/b/1"][2] is None
    off = Indexer(db.sessions, None, context_tokens=0)
    off.index_turn("v", "s", 0, "first")
    off.index_turn("v", "s", 1, "second")
    assert stored(db, "v")["sessions/s/1"] == ("User: second", ["s:1"], None)


def test_context_is_a_bounded_tail(db: Database) -> None:
    indexer = Indexer(db.sessions, None, chunk_tokens=64, context_tokens=16)
    long_previous = " ".join(f"word{i}" for i in range(100))
    indexer.index_turn("u", "s", 0, long_previous)
    indexer.index_turn("u", "s", 1, "short reply")
    body, _, context = stored(db)["sessions/s/1"]
    assert isinstance(context, dict)
    head = body[: context["chars"]]
    assert head.startswith("…") and head.rstrip().endswith("word99")
    assert count_tokens(head) <= 17  # 16 tokens of context plus the newline's 0
    assert count_tokens(body) <= 64


def test_no_context_when_the_round_fills_the_chunk(db: Database) -> None:
    indexer = Indexer(db.sessions, None, chunk_tokens=32)
    indexer.index_turn("u", "s", 0, "previous round")
    indexer.index_turn("u", "s", 1, " ".join(["fill"] * 30))
    assert stored(db)["sessions/s/1"][2] is None


@pytest.mark.parametrize("budget", [1, 2, 5, 10, 50])
def test_tail_within(budget: int) -> None:
    source = "The quick brown fox jumps over the lazy dog; 我们明天去杭州。" * 3
    tail = tail_within(source, budget)
    assert count_tokens(tail) <= budget
    assert source.endswith(tail.lstrip("…"))


def test_tail_within_keeps_short_text() -> None:
    assert tail_within("short", 10) == "short"
    assert tail_within("anything", 0) == ""


def writer_in_between(
    indexer: Indexer, monkeypatch: pytest.MonkeyPatch, write: Callable[[], object]
) -> list[StagedIndex]:
    """Make ``write`` (another writer) land after ``indexer``'s next staging, before its
    apply; returns the stagings ``indexer`` applied or tried to."""
    apply = indexer._apply
    tried: list[StagedIndex] = []

    def apply_after_the_other_writer(staged: StagedIndex) -> None:
        if not tried:
            write()
        tried.append(staged)
        apply(staged)

    monkeypatch.setattr(indexer, "_apply", apply_after_the_other_writer)
    return tried


def test_a_next_round_written_meanwhile_is_not_reverted(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Re-indexing round 5 also re-indexes round 6 (its context), staged from round 6's text
    # as read before the lock: a newer round 6 stored meanwhile was replaced by the old one.
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 5, "old five about kayaks", "", WHEN)
    indexer.index_turn("u", "s", 6, "old six about ponies", "", WHEN)
    other = Indexer(db.sessions, None)
    tried = writer_in_between(
        indexer,
        monkeypatch,
        lambda: other.index_turn("u", "s", 6, "new six about horses", "", WHEN),
    )

    indexer.index_turn("u", "s", 5, "new five about canoes", "", WHEN)

    assert (
        stored(db)["sessions/s/6"][0] == "User: new five about canoes\nUser: new six about horses"
    )
    assert stored(db)["sessions/s/5"][0] == "User: new five about canoes"
    assert len(tried) == 2  # staged again from what was stored


def test_a_previous_round_written_meanwhile_is_the_context(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 5, "old five about kayaks", "", WHEN)
    other = Indexer(db.sessions, None)
    writer_in_between(
        indexer,
        monkeypatch,
        lambda: other.index_turn("u", "s", 5, "new five about canoes", "", WHEN),
    )

    indexer.index_turn("u", "s", 6, "six about horses", "", WHEN)

    assert stored(db)["sessions/s/6"][0] == "User: new five about canoes\nUser: six about horses"


# -- text without spaces (Chinese, Japanese, emoji): the tail is not cut to the next space --

CHINESE_ROUND = "User: " + "我上周去了杭州旅游，在西湖边喝了龙井茶，" * 12 + "\nAssistant: 好的"


@pytest.mark.parametrize(
    "previous",
    [
        CHINESE_ROUND,
        "User: "
        + "先週、東京でラーメンを食べました。とても美味しかったです。" * 10
        + "\nAssistant: はい",
        "User: " + "ฉันชอบกินข้าวผัดกับต้มยำกุ้งที่ร้านใกล้บ้าน" * 10,
    ],
)
def test_an_unspaced_round_keeps_nearly_all_the_context_budget(previous: str) -> None:
    """The tail used to start after the next ASCII space: in Chinese the one before the
    reply, so 2 of 128 tokens were kept ("…好的")."""
    tail = tail_within(previous, 128)
    assert 120 <= count_tokens(tail) <= 128
    assert previous.endswith(tail.removeprefix("…"))


def test_english_tails_still_start_after_a_space() -> None:
    source = "User: " + " ".join(f"word{i}" for i in range(60)) + "\nAssistant: fine thanks"
    assert (
        tail_within(source, 20)
        == "…word54 word55 word56 word57 word58 word59\nAssistant: fine thanks"
    )
    # a line break within a word's length is a boundary too (it was the space after it)
    assert tail_within("alpha beta gamma\nfive six", 4) == "…five six"


def test_a_tail_never_starts_inside_an_emoji_or_a_letter_with_its_accent() -> None:
    family = "👨\u200d👩\u200d👧\u200d👦"
    for source, budget in [(family * 40 + "\nAssistant: ok", 40), ("e\u0301" * 300, 50)]:
        tail = tail_within(source, budget).removeprefix("…")
        assert count_tokens(tail) <= budget - 1 and source.endswith(tail)
        start = len(source) - len(tail)
        assert start in {m.start() for m in regex.finditer(r"\X", source)}, tail[:4]


def test_a_chinese_round_is_indexed_with_its_previous_round_as_context(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "我上周去了杭州旅游，在西湖边喝了龙井茶，" * 12, "好的", WHEN)
    indexer.index_turn("u", "s", 1, "她们喜欢吗？", "喜欢", WHEN)
    body, _, context = stored(db)["sessions/s/1"]
    assert isinstance(context, dict)
    head = body[: context["chars"]]
    assert head.startswith("…") and head.endswith("在西湖边喝了龙井茶，\nAssistant: 好的\n")
    assert count_tokens(head) >= 120  # of the 128 allowed (it was 2: "…好的")

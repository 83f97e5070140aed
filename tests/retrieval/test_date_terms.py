"""A conversation round's date is among its BM25 terms (and nowhere else): a question that
names a day finds the rounds said that day, whose text has no date."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.retrieval import tokenize as rules
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.staging import content_hash
from memstrata.retrieval.terms import date_words, decode_terms, encode_terms, round_day

from .stored import insert_rows

MAY_3 = datetime(2023, 5, 3, 19, 30, tzinfo=UTC)
LATER = datetime(2023, 6, 1, tzinfo=UTC)
QUESTION = "Who did Maria have dinner with on May 3, 2023?"


def test_the_words_name_day_month_year_and_weekday_in_english() -> None:
    assert date_words(date(2023, 5, 8)) == "8 May 2023 Monday"
    assert date_words(date(2024, 2, 29)) == "29 February 2024 Thursday"  # leap day
    assert date_words(date(1999, 12, 31)) == "31 December 1999 Friday"


def test_the_day_is_the_utc_date_of_the_instant() -> None:
    path = "sessions/s/0"
    # The offset a timestamp came with is not stored (timestamptz keeps the instant), so
    # the day is the UTC one: the same at the write and at a later re-tokenising load.
    assert round_day(path, datetime(2023, 5, 3, 23, 30, tzinfo=timezone(-timedelta(hours=7)))) == (
        date(2023, 5, 4)
    )
    assert round_day(path, datetime(2023, 5, 4, 1, 0, tzinfo=timezone(timedelta(hours=9)))) == (
        date(2023, 5, 3)
    )
    assert round_day(path, datetime(2023, 5, 3, 23, 30)) == date(2023, 5, 3)  # naive is UTC
    late_on_the_28th = datetime(2024, 2, 28, 22, 0, tzinfo=timezone(-timedelta(hours=5)))
    assert round_day(path, late_on_the_28th) == date(2024, 2, 29)


def test_only_conversation_rows_have_a_day() -> None:
    assert round_day("MEMORY.md", MAY_3) is None
    assert round_day("notes/trip.md", MAY_3) is None
    assert round_day(None, MAY_3) is None
    assert round_day("sessions/s/0", None) is None


def test_the_date_words_follow_the_text_terms() -> None:
    body = "User: dinner with Anna"
    terms = [*rules.tokenize(body), "3", "may", "2023", "wednesday"]
    stored = encode_terms(body, date(2023, 5, 3))
    assert decode_terms(stored, body) == terms
    assert decode_terms(None, body, date(2023, 5, 3)) == terms  # made anew at a load
    assert decode_terms(encode_terms(body), body) == rules.tokenize(body)  # no day: no words


def _search(db: Database, user: str, query: str) -> list[str | None]:
    search = SearchService(IndexCache(db.sessions), None, decay=DecayPolicy(False))
    return [h.file_path for h in search.search(user, query, as_of=LATER).hits]


def test_a_question_naming_a_day_finds_that_days_round(db: Database) -> None:
    # One session per round, so no round carries another's text as context. The round of
    # May 3 is the longest, so on its words alone BM25 would rank it last.
    Indexer(db.sessions, None).index_rounds(
        "u",
        [
            Round("a", 0, "We had dinner at the harbour", "", MAY_3 - timedelta(days=2)),
            Round(
                "b", 0, "Dinner with Anna tonight, we talked for hours about her garden", "", MAY_3
            ),
            Round("c", 0, "Another dinner, this time with Sam", "", MAY_3 + timedelta(days=7)),
        ],
    )
    assert _search(db, "u", QUESTION)[0] == "sessions/b/0"
    with db.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT chunk_text FROM memory_embeddings WHERE file_path = 'sessions/b/0'")
        ).scalar_one()
    assert "May" not in stored and "2023" not in stored  # terms only, never the text


def test_memory_file_rows_get_no_date_terms(db: Database) -> None:
    body = "Lunch plans with the team"
    Indexer(db.sessions, None).index_memory_file("u", FileKind.MEMORY, body)
    with db.engine.connect() as conn:
        stored = conn.execute(text("SELECT bm25_terms FROM memory_embeddings")).scalar_one()
    assert decode_terms(stored, body) == rules.tokenize(body)
    today = date_words(datetime.now(UTC).date())
    assert _search(db, "u", today) == []
    with db.engine.begin() as conn:  # terms of other rules: made again at the load
        conn.execute(text("UPDATE memory_embeddings SET bm25_terms = '0x\tstale'"))
    assert _search(db, "u", "lunch") and _search(db, "u", today) == []


def test_terms_stored_under_version_3_are_made_again_with_the_date(db: Database) -> None:
    """A round stored before the date words (``TERMS_VERSION`` 3) is found by its day: its
    terms are made again at the load, had the version not been bumped they would not."""
    body = "User: dinner with Anna"
    version_3 = f"3{'b' if rules.CJK_BIGRAMS else 'u'}\t{' '.join(rules.tokenize(body))}"
    chunk = NewChunk("sessions/b/0", 0, body, content_hash(body), MAY_3, bm25_terms=version_3)
    insert_rows(db, "u", [chunk])
    assert _search(db, "u", "May 3, 2023") == ["sessions/b/0"]

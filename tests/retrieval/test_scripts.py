"""BM25 over scripts with combining marks, end to end (real PostgreSQL, BM25 only)."""

from __future__ import annotations

from datetime import UTC, datetime

from memstrata.db.database import Database
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.search import SearchService

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_hindi_word_finds_itself_not_words_sharing_its_consonants(db: Database) -> None:
    """हिन्दी was indexed as ह, न, द: a turn about a river (नदी → न, द) matched it."""
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "मैं नदी के पास रहता हूँ", "अच्छा", NOW)
    indexer.index_turn("u", "s", 1, "मैं हिन्दी सीख रहा हूँ", "बहुत अच्छा", NOW)
    hits = SearchService(IndexCache(db.sessions), None).search("u", "हिन्दी").hits
    assert [h.file_path for h in hits] == ["sessions/s/1"]


def test_pointed_and_unpointed_arabic_match(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "كَتَبَ الوَلَدُ رسالة", "جميل", NOW)
    hits = SearchService(IndexCache(db.sessions), None).search("u", "كتب").hits
    assert [h.file_path for h in hits] == ["sessions/s/0"]

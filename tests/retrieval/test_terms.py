"""BM25 terms stored with each row: written by every insert, used by the index load when
made under today's rules, and ignored (the text tokenised again) otherwise."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.retrieval import stage_docs as staging_module
from memstrata.retrieval import tokenize as rules
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.staging import content_hash
from memstrata.retrieval.terms import decode_terms, encode_terms, round_day, signature

from .stored import insert_rows

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_encode_then_decode_gives_the_tokenizer_output() -> None:
    for sample in ("Biscuit adopted puppies", "我最喜欢乌龙茶", "", "the of and"):
        stored = encode_terms(sample)
        assert stored.startswith(signature() + "\t")
        assert decode_terms(stored, sample) == rules.tokenize(sample)


def test_terms_made_under_other_rules_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = encode_terms("乌龙茶")
    monkeypatch.setattr(rules, "CJK_BIGRAMS", False)  # the bigram switch turned off
    assert decode_terms(stored, "乌龙茶") == ["乌", "龙", "茶"]
    assert decode_terms(None, "cats") == ["cat"]  # a row from before the column
    assert decode_terms("no tab here", "cats") == ["cat"]


def _insert(db: Database, user: str, body: str, terms: str | None) -> None:
    chunk = NewChunk("sessions/s/0", 0, body, content_hash(body), T0, bm25_terms=terms)
    insert_rows(db, user, [chunk])


def _found(db: Database, user: str, query: str) -> bool:
    search = SearchService(IndexCache(db.sessions), None, decay=DecayPolicy(False))
    return bool(search.search(user, query, as_of=T0).hits)


def test_the_index_load_uses_the_stored_terms(db: Database) -> None:
    # Stored terms that differ from the text prove which of the two the load used.
    _insert(db, "fresh", "apple pie", f"{signature()}\tzebra")
    assert _found(db, "fresh", "zebra") and not _found(db, "fresh", "apple")
    _insert(db, "stale", "apple pie", "0x\tzebra")  # other rules: tokenised anew
    assert _found(db, "stale", "apple") and not _found(db, "stale", "zebra")


def test_every_written_row_carries_its_terms(db: Database) -> None:
    Indexer(db.sessions, None).index_rounds("u", [Round("s", 0, "My cats like tuna", "", T0)])
    _insert(db, "u2", "Lisbon trip", None)  # no terms given: the insert makes them
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT chunk_text, bm25_terms, file_path, created_at FROM memory_embeddings")
        ).all()
    assert len(rows) == 2  # two conversation rows: both name their day (T0 is a Thursday)
    assert all(terms.endswith(" 1 january 2026 thursday") for _, terms, _, _ in rows)
    assert all(terms == encode_terms(body, round_day(path, at)) for body, terms, path, at in rows)


def test_a_rewrite_encodes_only_the_rows_it_inserts(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = Indexer(db.sessions, None, chunk_tokens=16)
    first = " ".join(f"alpha{i}" for i in range(40))
    idx.index_memory_file("w", FileKind.MEMORY, first + "\n\nomega tail")
    encoded: list[str] = []
    real = staging_module.encode_terms

    def counting(body: str, day: date | None = None) -> str:
        encoded.append(body)
        return real(body, day)

    monkeypatch.setattr(staging_module, "encode_terms", counting)
    idx.index_memory_file("w", FileKind.MEMORY, first + "\n\nomega changed tail")
    assert encoded and all("changed" in body for body in encoded)  # the new chunk only
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT chunk_text, bm25_terms FROM memory_embeddings WHERE user_id = 'w'")
        ).all()
    assert len(rows) > 1 and all(terms == encode_terms(body) for body, terms in rows)


def test_terms_stored_before_case_folding_are_made_again(db: Database) -> None:
    """Stored terms carry the rules' version: a row stored under version 2 (``str.lower``)
    holds ``fußball`` and would never match a query folded to ``fussball``, had the
    version not been bumped with the rules (``TERMS_VERSION`` 3)."""
    version_2 = f"2{'b' if rules.CJK_BIGRAMS else 'u'}"
    _insert(db, "u", "Fußball am Sonntag", f"{version_2}\tfußball sonntag")
    assert _found(db, "u", "FUSSBALL")


# Three Thai rounds, each in a session of its own (no round carries another's tail), and
# for each a word said inside it with no space around it.
THAI_WORDS = {
    "ข้าว": "ฉันชอบกินข้าวผัดกับต้มยำกุ้งที่ร้านใกล้บ้าน",
    "หมอฟัน": "วันอังคารฉันมีนัดกับหมอฟันตอนสี่โมงเย็น",
    "สุนัข": "สุนัขของเราชื่อบิสกิต ชอบวิ่งในสวนทุกเช้าก่อนไปทำงาน",
}


def test_a_thai_word_is_found_inside_an_unspaced_sentence(db: Database) -> None:
    """A Thai run between spaces was cut at its marks, which were dropped, so ข้าว (ข, าว)
    matched no term of a sentence saying ข้าวผัด (…, นข, าวผ, …)."""
    rounds = [Round(f"s{i}", 0, said, "", T0) for i, said in enumerate(THAI_WORDS.values())]
    Indexer(db.sessions, None).index_rounds("th", rounds)
    search = SearchService(IndexCache(db.sessions), None, decay=DecayPolicy(False))
    for word, said in THAI_WORDS.items():
        hits = search.search("th", word, as_of=T0).hits
        assert hits and said in hits[0].text, word
        assert hits[0].explain["bm25_rank"] == 1


def test_thai_terms_stored_before_clusters_are_made_again(db: Database) -> None:
    """A row stored under version 4 holds Thai cut at its marks: used as stored, it would
    never match the clusters of a query (``TERMS_VERSION`` 5)."""
    version_4 = f"4{'b' if rules.CJK_BIGRAMS else 'u'}"
    _insert(db, "u", "ฉันชอบกินข้าวผัด", f"{version_4}\tฉ นชอบก นข าวผ ด")
    assert _found(db, "u", "ข้าว")

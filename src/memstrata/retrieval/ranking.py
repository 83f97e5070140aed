"""What a search ranks and answers with: both retrievers' candidates (``Candidates``), the
time-decay policy (``DecayPolicy``), the ranking rule (``rank``: RRF over both rankings,
then decay over every candidate — the spec's — or, opt-in, within the relevance pool
(``decay_pool``), through ``fusion.fuse``; convex score fusion instead of RRF when asked,
``fusion_scores``) and the hits and response (``SearchHit``, ``SearchResponse``).

Apart from ``search`` because none of it reads an index, the database or an embedder: the
recall harness (``bench.harness``) and the benchmarks rank candidates they gathered
themselves with the same rule the service uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from memstrata.config import CANDIDATE_MULTIPLIER, MIN_CANDIDATES_DECAY
from memstrata.retrieval.fusion import DAY_SECONDS, HALF_LIFE_DAYS, RRF_K, Fusion, fuse
from memstrata.retrieval.rows import Row


@dataclass(frozen=True)
class DecayPolicy:
    enabled: bool = True
    half_life_days: float = HALF_LIFE_DAYS
    floor: float = 0.0


@dataclass(frozen=True)
class SearchHit:
    """One result. ``file_path`` is where the row came from: the memory file's name
    (``USER.md``), ``sessions/<session_id>/<turn_index>`` for a conversation round, or the
    path a note was indexed under; None only for a row stored without one, which
    memstrata's indexing never writes (the ``memory_embeddings`` column is nullable, and
    another program sharing the table may leave it empty), whose ``source`` is ``notes``."""

    text: str
    file_path: str | None
    chunk_index: int | None
    source: str
    created_at: datetime
    source_ids: tuple[str, ...]
    score: float
    explain: dict[str, float | int | bool | None]

    def to_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "file_path": self.file_path,
            "chunk_index": self.chunk_index,
            "source": self.source,
            "created_at": self.created_at.isoformat(),
            "source_ids": list(self.source_ids),
            "score": self.score,
            "explain": dict(self.explain),
        }


@dataclass(frozen=True)
class SearchResponse:
    query: str
    mode: str  # "hybrid" or "bm25"
    hits: list[SearchHit]
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "query": self.query,
            "mode": self.mode,
            "hits": [h.to_dict() for h in self.hits],
            "timings_ms": dict(self.timings_ms),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Candidates:
    """Both retrievers' rankings for one query (row keys, best first) and their rows."""

    bm25: list[int]
    vector: list[int]
    rows: dict[int, Row]
    mode: str  # "hybrid" when a query vector met stored vectors, else "bm25"
    warnings: list[str] = field(default_factory=list)  # why a side could not take part
    # Each side's raw scores by key (BM25, cosine) for convex fusion; a side that gave
    # ranks only leaves its dict short and the ranking falls back to RRF.
    bm25_scores: dict[int, float] = field(default_factory=dict)
    vector_scores: dict[int, float] = field(default_factory=dict)


def decay_pool(
    top_k: int, multiplier: int = CANDIDATE_MULTIPLIER, minimum: int = MIN_CANDIDATES_DECAY
) -> int:
    """How many of the most relevant rows (by the fused score before decay) time decay
    re-orders when the opt-in relevance pool is on (``MEMSTRATA_DECAY_POOL``): as many as
    one side's candidates under decay, max(3 × top_k, 30). It does not grow below 10 hits,
    so the first hits are the same at top_k 5 and 10 (docs/BENCHMARKS.md, "Decay within
    the relevant pool")."""
    return max(multiplier * top_k, minimum)


def fusion_scores(
    found: Candidates, fusion: Fusion
) -> tuple[dict[int, float], dict[int, float]] | None:
    """Both sides' raw scores when ``fusion`` is convex and every candidate has one; None
    (rank by RRF) otherwise — the spec's default, and the fallback for ranks only."""
    if fusion != "convex":
        return None
    complete = all(k in found.bm25_scores for k in found.bm25) and all(
        k in found.vector_scores for k in found.vector
    )
    if not complete:
        return None
    wanted_bm25, wanted_vector = set(found.bm25), set(found.vector)
    return (
        {k: v for k, v in found.bm25_scores.items() if k in wanted_bm25},
        {k: v for k, v in found.vector_scores.items() if k in wanted_vector},
    )


def rank(
    found: Candidates,
    *,
    top_k: int,
    as_of: datetime | None,
    decay: DecayPolicy,
    rrf_k: int = RRF_K,
    pool: int | None = None,
    fusion: Fusion = "rrf",
) -> list[SearchHit]:
    """RRF (or convex score fusion, ``fusion_scores``) over both rankings, then time decay
    from ``as_of`` (default now) over every candidate — the spec's — or, with ``pool``,
    within the ``pool`` most relevant rows only (the opt-in ``decay_pool``): the best
    ``top_k`` hits, explained. No age is negative, so no row outranks by being future."""
    now_ts = (as_of or datetime.now(UTC)).timestamp()
    rows = found.rows
    fused = fuse(
        found.bm25,
        found.vector,
        k=rrf_k,
        top_k=top_k,
        ages_days={k: max(0.0, now_ts - r.created_at) / DAY_SECONDS for k, r in rows.items()},
        resident={k: r.source == "memory" for k, r in rows.items()},
        half_life_days=decay.half_life_days,
        floor=decay.floor,
        decay=decay.enabled,
        pool=pool,
        scores=fusion_scores(found, fusion),
    )
    return [_hit(rows[f.key], f.score, f.explain()) for f in fused]


def _hit(row: Row, score: float, explain: dict[str, float | int | bool | None]) -> SearchHit:
    # ``context_chars``: how much of ``text`` is the previous round's tail, so a reader (the
    # MCP tool's lines, a client) does not take that turn's words for this one's.
    explain = {**explain, "context_chars": row.context_chars}
    return SearchHit(
        text=row.text,
        file_path=row.file_path,
        chunk_index=row.chunk_index,
        source=row.source,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        source_ids=row.source_ids,
        score=score,
        explain=explain,
    )

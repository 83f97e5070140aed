"""Hybrid search: BM25 + vector candidates, RRF (k=60), time decay.

Each side contributes ``max(3 × top_k, min_candidates)`` candidates: the spec's 3 × top_k
whenever it is larger, and a fixed minimum depth below that, so the first results of a
search do not change with ``top_k``. The minimum is 50 with decay off and 30 with decay on
(both chosen by measurement, docs/BENCHMARKS.md). Decay then re-orders only the
relevance pool — the max(3 × top_k, 30) most relevant fused rows before decay — so a
recent row that matched poorly cannot climb over an old answer. ``fusion="convex"``
(``MEMSTRATA_SEARCH_FUSION``, opt-in, a measured departure from the spec) fuses both
sides' min-max normalised scores instead of RRF.

``as_of`` (default now) is the moment the search is made from: ages, and so decay, are
measured from it, and dated rows (conversations, notes) after it are left out. The
resident files have no history (a spec non-goal), so they always take part. No age is
ever negative.

Resident files (MEMORY / USER / SOUL / AGENTS.md) never decay; conversations and notes
decay by ``floor + (1 − floor) · 0.5^(age / half_life)`` (floor 0 is the spec's plain
exponential). Without an embedding API — or when the query's embedding fails — the vector
side is empty and the result is pure BM25 ranking, fused the same way. The ranking rule
and the result types are in ``retrieval.ranking``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import get_args

import numpy as np

from memstrata.config import (
    CANDIDATE_MULTIPLIER,
    MIN_CANDIDATES,
    MIN_CANDIDATES_DECAY,
    QUERY_CACHE_ENTRIES,
)
from memstrata.errors import EmbeddingError, EmbeddingRejectedError, InvalidContentError
from memstrata.logs import log_event
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.candidate_rows import as_of_filter as as_of_filter
from memstrata.retrieval.candidate_rows import bm25_top as bm25_top
from memstrata.retrieval.candidate_rows import bm25_top_scored, source_filter
from memstrata.retrieval.embeddings import (
    CircuitOpenError,
    EmbeddingLengthError,
    EmbeddingOutageError,
    EmbeddingProvider,
)
from memstrata.retrieval.fusion import RRF_K, Fusion
from memstrata.retrieval.limits import DEFAULT_TOP_K, MAX_QUERY_CHARS, MAX_TOP_K, SOURCES
from memstrata.retrieval.query_cache import CachedQueryEmbedder
from memstrata.retrieval.ranking import (
    Candidates,
    DecayPolicy,
    SearchResponse,
    decay_pool,
    rank,
)
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.search_stats import SearchStats, stage_histogram
from memstrata.retrieval.tokenize import tokenize
from memstrata.retrieval.warmer import IndexWarmer
from memstrata.text import lone_surrogate_at

logger = logging.getLogger(__name__)


class SearchService:
    def __init__(
        self,
        cache: IndexCache,
        embedder: EmbeddingProvider | None = None,
        *,
        rrf_k: int = RRF_K,
        candidate_multiplier: int = CANDIDATE_MULTIPLIER,
        min_candidates: int = MIN_CANDIDATES,
        min_candidates_decay: int = MIN_CANDIDATES_DECAY,
        decay: DecayPolicy | None = None,
        vector_backend: str = "memory",
        query_cache_entries: int = QUERY_CACHE_ENTRIES,
        warmer: IndexWarmer | None = None,
        fusion: Fusion = "rrf",
    ) -> None:
        if vector_backend not in ("memory", "pgvector"):
            raise ValueError("vector_backend must be 'memory' or 'pgvector'")
        if fusion not in get_args(Fusion):
            raise ValueError(f"fusion must be one of {get_args(Fusion)}, got {fusion!r}")
        self.fusion: Fusion = fusion
        self.vector_backend = vector_backend
        self.cache = cache
        # Query embeddings go through a bounded LRU (0 turns it off).
        self.embedder: EmbeddingProvider | None = (
            CachedQueryEmbedder(embedder, query_cache_entries)
            if embedder is not None and query_cache_entries > 0
            else embedder
        )
        self.rrf_k = rrf_k
        self.candidate_multiplier = candidate_multiplier
        self.min_candidates = min_candidates
        self.min_candidates_decay = min_candidates_decay
        self.decay = decay or DecayPolicy()
        self.warmer = warmer
        self.times = stage_histogram()

    def stats(self) -> SearchStats:
        """The stage durations of every ``search`` so far, and the query-embedding cache's
        hits and misses (``/metrics``)."""
        cached = self.embedder if isinstance(self.embedder, CachedQueryEmbedder) else None
        return SearchStats(
            list(self.times.collect()),
            cached.hits if cached is not None else 0,
            cached.misses if cached is not None else 0,
        )

    def _embed_query(self, user_id: str, query: str) -> list[float]:
        assert self.embedder is not None
        if isinstance(self.embedder, CachedQueryEmbedder):
            return self.embedder.embed_for(user_id, [query], "query")[0]
        return self.embedder.embed([query], "query")[0]

    def warm(self, user_id: str) -> None:
        """After an import: bring the user's index (and its snapshot) up to date in the
        background once enough rows came in (``retrieval.warmer``); returns at once."""
        if self.warmer is not None:
            self.warmer.schedule(user_id, self.model)

    @property
    def model(self) -> str | None:
        """The embedding model whose vectors this service searches (None: BM25 only)."""
        return self.embedder.name if self.embedder is not None else None

    def candidate_depth(
        self, top_k: int, decay: DecayPolicy | None = None, minimum: int | None = None
    ) -> int:
        """Candidates per retriever: the spec's 3 × top_k, never below the measured minimum
        for ``decay`` (default: the service's policy) being on or off, or below
        ``minimum`` when given (the benchmarks' depth grid)."""
        if minimum is None:
            decaying = (decay or self.decay).enabled
            minimum = self.min_candidates_decay if decaying else self.min_candidates
        return max(top_k * self.candidate_multiplier, minimum)

    def decay_pool(self, top_k: int) -> int:
        """The most relevant rows decay re-orders (``ranking.decay_pool``), as deep as one
        side's candidates under decay with this service's settings."""
        return decay_pool(top_k, self.candidate_multiplier, self.min_candidates_decay)

    def search(
        self,
        user_id: str,
        query: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        sources: Sequence[str] | None = None,
        as_of: datetime | None = None,
    ) -> SearchResponse:
        """Search one user's memory as of ``as_of`` (default now). Only that user's rows
        are ever read."""
        validate_user_id(user_id)
        query = _check_query(query)
        top_k = _check_top_k(top_k)
        wanted = _check_sources(sources)
        as_of = _check_as_of(as_of)
        warnings: list[str] = []
        vector: np.ndarray | None = None
        embed_ms = 0.0
        if self.embedder is not None:
            started = time.perf_counter()
            try:
                vector = np.asarray(self._embed_query(user_id, query), dtype=np.float32)
            except (EmbeddingError, IndexError) as exc:
                # The cause goes to the log; the caller (an end user, an agent) is told only
                # what happened, not where the embedding API lives.
                warnings.append(
                    f"query embedding failed, searched with BM25 only: {query_failure(exc)}"
                )
                log_event(
                    logger,
                    "search.embedding_failed",
                    logging.WARNING,
                    user_id=user_id,
                    error=str(exc),
                )
            embed_ms = (time.perf_counter() - started) * 1000
        response = self.search_with_vector(
            user_id, query, vector, top_k=top_k, sources=wanted, as_of=as_of
        )
        response.timings_ms["embed"] = embed_ms
        response.warnings[:0] = warnings
        if self.embedder is not None:
            self.times.labels(stage="embed").observe(embed_ms / 1000)
        self.times.labels(stage="search").observe(response.timings_ms["search"] / 1000)
        log_event(
            logger,
            "search.done",
            user_id=user_id,
            results=len(response.hits),
            mode=response.mode,
            ms=round(response.timings_ms["search"] + embed_ms, 2),
        )
        return response

    def search_with_vector(
        self,
        user_id: str,
        query: str,
        query_vector: np.ndarray | None,
        *,
        top_k: int = DEFAULT_TOP_K,
        sources: Sequence[str] | None = None,
        as_of: datetime | None = None,
    ) -> SearchResponse:
        """The search after the query's embedding (what the latency benchmark times)."""
        started = time.perf_counter()
        found = self.candidates(
            user_id, query, query_vector, self.candidate_depth(top_k), sources, as_of=as_of
        )
        hits = rank(
            found,
            top_k=top_k,
            as_of=as_of,
            decay=self.decay,
            rrf_k=self.rrf_k,
            pool=self.decay_pool(top_k),
            fusion=self.fusion,
        )
        elapsed = (time.perf_counter() - started) * 1000
        return SearchResponse(query, found.mode, hits, {"search": elapsed}, found.warnings)

    def candidates(
        self,
        user_id: str,
        query: str,
        query_vector: np.ndarray | None,
        n: int,
        sources: Sequence[str] | None = None,
        *,
        as_of: datetime | None = None,
    ) -> Candidates:
        """The best ``n`` rows of each retriever that existed at ``as_of``, and the rows
        they name."""
        model = self.model
        index = self.cache.get(user_id, model)
        with index.lock:
            allowed = None if sources is None else source_filter(index, set(sources))
            if as_of is not None:
                allowed = as_of_filter(index, as_of.timestamp(), allowed)
            terms = tokenize(query)
            bm25_hits = bm25_top_scored(index, terms, n, allowed)
            bm25_ranked = [key for key, _ in bm25_hits]
            vector_hits: list[tuple[int, float]] = []
            # A warm index whose vectors were all removed still has a VectorIndex: only
            # live vectors make the search hybrid.
            vectors = index.vectors if index.vectors is not None and len(index.vectors) else None
            # Nor do vectors of another length than the query's (the API's length changed:
            # the stored ones wait to be re-embedded): none of them can be compared with it.
            other_length = bool(
                query_vector is not None
                and vectors is not None
                and len(query_vector) != vectors.dim
            )
            if other_length:
                vectors = None
            users_rows = len(index.rows)
            if query_vector is not None and vectors is not None:
                if self.vector_backend == "pgvector" and model is not None:
                    vector_hits = self._pgvector_top(user_id, query_vector, model, n, allowed)
                else:
                    vector_hits = vectors.top_n(query_vector, n, allowed)
            keys = set(bm25_ranked) | {key for key, _ in vector_hits}
            rows = {k: index.rows[k] for k in keys if k in index.rows}
        vector_hits = [(k, s) for k, s in vector_hits if k in rows]
        vector_ranked = [k for k, _ in vector_hits]
        hybrid = query_vector is not None and vectors is not None
        warnings = side_warnings(
            embedder=self.embedder is not None or query_vector is not None,
            query_embedded=query_vector is not None,
            vectors=vectors is not None,
            rows=users_rows,
            terms=bool(terms),
            other_length=other_length,
        )
        mode = "hybrid" if hybrid else "bm25"
        return Candidates(
            bm25_ranked, vector_ranked, rows, mode, warnings, dict(bm25_hits), dict(vector_hits)
        )

    def _pgvector_top(
        self,
        user_id: str,
        query_vector: np.ndarray,
        model: str,
        n: int,
        allowed: set[int] | None,
    ) -> list[tuple[int, float]]:
        """(key, cosine) pairs from pgvector, best first."""
        with self.cache.sessions() as session:
            return EmbeddingRepository(session, user_id).nearest(
                query_vector.tolist(), model, n, None if allowed is None else sorted(allowed)
            )


def query_failure(exc: Exception) -> str:
    """Why the query embedding failed, in words for the person or agent who searched (the
    exception's name meant nothing to them; its text, naming the API's address, goes to
    the log only)."""
    if isinstance(exc, CircuitOpenError):
        if isinstance(exc.last_failure, EmbeddingLengthError):
            return f"{OTHER_LENGTH_ANSWER} and is not asked again for a moment"
        return "the embedding service failed repeatedly and is not asked again for a moment"
    if isinstance(exc, EmbeddingLengthError):
        return OTHER_LENGTH_ANSWER
    if isinstance(exc, EmbeddingOutageError):
        return "the embedding service is unreachable or did not answer in time"
    if isinstance(exc, EmbeddingRejectedError):
        return "the embedding service refused the query"
    return "the embedding service gave an unusable answer"


OTHER_LENGTH_ANSWER = (
    "the embedding service answered with vectors of another length than the embedding "
    "model's (a configuration or model change)"
)
NO_EMBEDDING_API = "no embedding API is configured: searched with BM25 only"
NO_VECTORS_YET = (
    "none of this user's rows has a vector of the embedding model yet (they are embedded "
    "in the background): searched with BM25 only"
)
OTHER_LENGTH = (
    "the embedding model's vectors changed length and none of this user's stored vectors "
    "has the new length yet (they are embedded again in the background): searched with "
    "BM25 only"
)
NO_SEARCHABLE_WORDS = (
    "the query has no searchable words (only common words, punctuation or symbols), so "
    "keyword search matched nothing"
)


def side_warnings(
    *,
    embedder: bool,
    query_embedded: bool,
    vectors: bool,
    rows: int,
    terms: bool,
    other_length: bool = False,
) -> list[str]:
    """What the caller should know about a side of the search that could not take part.
    A failed query embedding is reported where it happens (``SearchService.search``).
    ``other_length``: the user's vectors have another length than the query's."""
    warnings = []
    if not embedder:
        warnings.append(NO_EMBEDDING_API)
    elif query_embedded and other_length:
        warnings.append(OTHER_LENGTH)
    elif query_embedded and not vectors and rows:
        warnings.append(NO_VECTORS_YET)
    if not terms:
        hybrid = query_embedded and vectors
        warnings.append(NO_SEARCHABLE_WORDS + ("; results are by meaning only" if hybrid else ""))
    return warnings


def _check_as_of(as_of: object) -> datetime | None:
    if as_of is None:
        return None
    if not isinstance(as_of, datetime):
        raise InvalidContentError("as_of must be a datetime (ISO 8601 over HTTP)")
    return as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)


def _check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidContentError("query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidContentError(f"query is longer than {MAX_QUERY_CHARS} characters")
    if (at := lone_surrogate_at(query)) is not None:  # the embedding request cannot carry it
        raise InvalidContentError(
            f"query is not valid Unicode: it contains a lone surrogate "
            f"({query[at]!r} at character {at})"
        )
    return query


def _check_top_k(top_k: object) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidContentError(f"top_k must be an integer from 1 to {MAX_TOP_K}")
    return top_k


def _check_sources(sources: Sequence[str] | None) -> list[str] | None:
    if sources is None:
        return None
    if isinstance(sources, str):
        sources = [sources]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise InvalidContentError(
            f"sources must be a non-empty list drawn from {', '.join(SOURCES)}; got {list(sources)}"
        )
    return list(sources)

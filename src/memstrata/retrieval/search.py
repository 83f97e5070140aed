"""Hybrid search: BM25 + vector candidates, RRF (k=60), time decay.

Each side contributes ``max(3 × top_k, min_candidates)`` candidates: the spec's 3 × top_k
whenever it is larger, and a fixed minimum depth below that, so the first results of a
search do not change with ``top_k``. The minimum is 50 with decay off and 30 with decay on
(both chosen by measurement, docs/BENCHMARKS.md). Decay then re-orders every candidate,
as the spec says; ``decay_pool=True`` (``MEMSTRATA_DECAY_POOL``, opt-in, a measured
departure) has it re-order only the relevance pool — the max(3 × top_k, 30) most relevant
fused rows before decay — so a recent row that matched poorly cannot climb over an old
answer. ``fusion="convex"`` (``MEMSTRATA_SEARCH_FUSION``, opt-in, a measured departure
from the spec) fuses both sides' min-max normalised scores instead of RRF.

``as_of`` (default now) is the moment the search is made from: ages, and so decay, are
measured from it, and dated rows (conversations, notes) after it are left out. The
resident files have no history (a spec non-goal), so they always take part. No age is
ever negative.

Resident files (MEMORY / USER / SOUL / AGENTS.md) never decay; conversations and notes
decay by ``floor + (1 − floor) · 0.5^(age / half_life)`` (floor 0 is the spec's plain
exponential). Without an embedding API — or when the query's embedding fails — the vector
side is empty and the result is pure BM25 ranking, fused the same way. The ranking rule
and the result types are in ``retrieval.ranking``, the checks of a search's arguments in
``retrieval.search_input``, and what the caller is told about a side that could not take
part in ``retrieval.search_warnings``. A search whose client hangs up ends without an
answer, its query not embedded or its embedding abandoned (``retrieval.hangup``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import get_args

import numpy as np

from memstrata.config import (
    CANDIDATE_MULTIPLIER,
    MIN_CANDIDATES,
    MIN_CANDIDATES_DECAY,
    QUERY_CACHE_ENTRIES,
)
from memstrata.errors import EmbeddingError
from memstrata.logs import log_event
from memstrata.retrieval.breaker import bulk_owner
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.candidate_rows import as_of_filter as as_of_filter
from memstrata.retrieval.candidate_rows import bm25_top as bm25_top
from memstrata.retrieval.candidate_rows import bm25_top_scored, source_filter
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.fusion import RRF_K, Fusion
from memstrata.retrieval.hangup import ClientGoneError, client_left, raise_if_left
from memstrata.retrieval.limits import DEFAULT_TOP_K
from memstrata.retrieval.query_cache import CachedQueryEmbedder
from memstrata.retrieval.ranking import (
    Candidates,
    DecayPolicy,
    SearchResponse,
    decay_pool,
    rank,
)
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.search_input import check_search
from memstrata.retrieval.search_stats import SearchStats, stage_histogram

# OTHER_LENGTH and query_failure: re-exported for callers that import them from here.
from memstrata.retrieval.search_warnings import OTHER_LENGTH as OTHER_LENGTH
from memstrata.retrieval.search_warnings import query_failure as query_failure
from memstrata.retrieval.search_warnings import side_warnings
from memstrata.retrieval.tokenize import tokenize
from memstrata.retrieval.warmer import IndexWarmer

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
        decay_pool: bool = False,
        open_check: Callable[[], None] | None = None,
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
        self.decay_pooled = decay_pool
        self.warmer = warmer
        # The runtime's rule of a closed runtime (``runtime.refuse_if_closed``): before the
        # query's embedding, whose client ``close()`` has closed.
        self.open_check = open_check
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
        # A long query waits in its user's turn of the passage lane (long_query), and leaves
        # it unsent if its client hangs up meanwhile (hangup).
        with bulk_owner(user_id, guard=raise_if_left):
            if isinstance(self.embedder, CachedQueryEmbedder):
                return self.embedder.embed_for(user_id, [query], "query")[0]
            return self.embedder.embed([query], "query")[0]

    def _query_vector(self, user_id: str, query: str) -> np.ndarray:
        """The query's vector, or ``ClientGoneError`` once its client has hung up: before
        the request is sent (none is), while a long one waits in the passage lane, or
        while the answer was on its way (thrown away: ``hangup``)."""
        if client_left():
            raise self._abandoned(user_id, "before_embedding")
        try:
            vector = np.asarray(self._embed_query(user_id, query), dtype=np.float32)
        except ClientGoneError as exc:
            raise self._abandoned(user_id, "waiting_for_lane") from exc
        if client_left():
            raise self._abandoned(user_id, "embedding")
        return vector

    @staticmethod
    def _abandoned(user_id: str, stage: str) -> ClientGoneError:
        """The error that ends a search whose client hung up, logged once (INFO: a client
        leaving is no fault of the server's)."""
        log_event(logger, "search.client_gone", user_id=user_id, stage=stage)
        return ClientGoneError(f"the search's client hung up ({stage})")

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

    def decay_pool(self, top_k: int, pooled: bool | None = None) -> int | None:
        """The pool ``rank`` gives decay: None — every candidate, the spec's — unless the
        relevance pool is on (``pooled``, default this service's setting), then the most
        relevant rows as deep as one side's candidates under decay (``ranking.decay_pool``)."""
        if not (self.decay_pooled if pooled is None else pooled):
            return None
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
        if self.open_check is not None:
            self.open_check()
        _, query, top_k, wanted, as_of = check_search(user_id, query, top_k, sources, as_of)
        warnings: list[str] = []
        vector: np.ndarray | None = None
        embed_ms = 0.0
        if self.embedder is not None:
            started = time.perf_counter()
            try:
                vector = self._query_vector(user_id, query)
            except (EmbeddingError, IndexError) as exc:
                if client_left():  # nobody waits for the answer, nor for this warning
                    raise self._abandoned(user_id, "embedding") from exc
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
            unembedded = 0 if vectors is None else max(0, users_rows - len(vectors))
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
            unembedded=unembedded,
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

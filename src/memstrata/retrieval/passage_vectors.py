"""Vectors for staged rows: reused by content hash when known, else embedded in one batched
call whose failures are counted in the rows' reports (the rows are stored without a vector).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from memstrata.errors import EmbeddingError, VectorDimensionError
from memstrata.logs import log_event
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.staging import IndexReport
from memstrata.retrieval.vector import pad_vector

# The indexer's events (embedding.failed) keep the indexer's logger name.
logger = logging.getLogger("memstrata.retrieval.indexer")


def vectors_for(
    embedder: EmbeddingProvider | None,
    user_id: str,
    pending: Sequence[tuple[int, NewChunk]],
    reusable: dict[str, Any],
    reports: list[IndexReport],
    embed: bool = True,
) -> dict[str, list[float]]:
    """Vectors by content hash: reused when known, else embedded in one batched call
    (or, when not ``embed``, left to the background worker and counted as deferred)."""
    vectors: dict[str, list[float]] = {
        row.content_hash: [float(x) for x in reusable[row.content_hash]]
        for _, row in pending
        if row.content_hash in reusable
    }
    todo: dict[str, str] = {}
    for _, row in pending:
        if row.content_hash not in vectors:
            todo.setdefault(row.content_hash, row.chunk_text)
    if not todo or embedder is None:
        return vectors
    per_report = Counter(n for n, row in pending if row.content_hash in todo)
    if not embed:
        for n, count in per_report.items():
            reports[n].deferred += count
        return vectors
    started = time.perf_counter()
    got, error = embed_passages(embedder, list(todo.values()), user_id)
    seconds = time.perf_counter() - started
    embedded = {h: v for h, v in zip(todo, got, strict=True) if v is not None}
    failed = Counter(
        n for n, row in pending if row.content_hash in todo and row.content_hash not in embedded
    )
    for n, count in per_report.items():
        reports[n].embed_seconds = seconds / len(per_report)
        reports[n].embedding_failed += failed[n]
        reports[n].embedded += count - failed[n]
        if failed[n]:
            reports[n].warnings.append(error)
    vectors.update(embedded)
    return vectors


def embed_passages(
    embedder: EmbeddingProvider, texts: list[str], user_id: str
) -> tuple[list[list[float] | None], str]:
    """One vector or None per text. An embedder with ``embed_each`` isolates bad texts;
    the rows of failed texts are stored without a vector and healed later."""
    each = getattr(embedder, "embed_each", None)
    try:
        results = each(texts, "passage") if each is not None else embedder.embed(texts, "passage")
        if len(results) != len(texts):
            raise EmbeddingError(f"got {len(results)} vectors for {len(texts)} texts")
    except (EmbeddingError, VectorDimensionError) as exc:
        results = [exc] * len(texts)
    vectors: list[list[float] | None] = []
    errors: list[str] = []
    kinds: list[str] = []
    for result in results:
        if isinstance(result, list):
            try:
                pad_vector(result)  # validates length and finiteness before storing
                vectors.append(result)
                continue
            except VectorDimensionError as exc:
                result = exc
        vectors.append(None)
        errors.append(str(result))
        kinds.append(type(result).__name__)
    if not errors:
        return vectors, ""
    log_event(
        logger,
        "embedding.failed",
        logging.WARNING,
        user_id=user_id,
        model=embedder.name,
        batch_size=len(texts),
        failed=len(errors),
        error=errors[0],
    )
    # The caller (an end user, an agent) learns what happened and the error's kind; the
    # cause, which names the embedding API's address, goes to the log above only.
    message = (
        f"embedding failed for {len(errors)} of {len(texts)} text(s), stored without "
        f"vectors (BM25 only until re-embedded; {kinds[0]})"
    )
    return vectors, message

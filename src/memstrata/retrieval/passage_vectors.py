"""Vectors for staged rows: reused by content hash when known, else embedded in one batched
call whose failures are counted in the rows' reports (the rows are stored without a vector);
and vectors for stored rows without one (``embed_and_store``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import EmbeddingError, VectorDimensionError
from memstrata.logs import log_event
from memstrata.retrieval.breaker import bulk_owner
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.records import NewChunk, StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository
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
) -> tuple[dict[str, list[float]], set[str]]:
    """Vectors by content hash: reused when known, else embedded in one batched call
    (or, when not ``embed``, left to the background worker and counted as deferred); and
    the content hashes whose embedding failed."""
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
        return vectors, set()
    per_report = Counter(n for n, row in pending if row.content_hash in todo)
    if not embed:
        for n, count in per_report.items():
            reports[n].deferred += count
        return vectors, set()
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
    missed = set(todo) - set(embedded) if len(embedded) < len(todo) else set()
    return vectors, missed


def embed_and_store(
    sessions: sessionmaker[Session],
    embedder: EmbeddingProvider,
    user_id: str,
    rows: Sequence[StoredChunk],
) -> tuple[set[int], int, str]:
    """Embed stored rows' texts on the user's turn of the embedding API (breaker.Lanes),
    outside any transaction, then give each row its vector under the user's lock with
    ``replace_vectors``: rows are immutable, so a row still there holds the text embedded,
    and a row a writer replaced meanwhile is skipped. Returns the ids embedded, the rows
    written and the error of the texts that failed ("" when none did)."""
    with bulk_owner(user_id):
        vectors, error = embed_passages(embedder, [c.chunk_text for c in rows], user_id)
    got = {c.id: v for c, v in zip(rows, vectors, strict=True) if v is not None}
    if not got:
        return set(), 0, error
    with transaction(sessions) as session:
        repo = EmbeddingRepository(session, user_id)
        repo.lock()
        stored = repo.replace_vectors(got, embedder.name)
    return set(got), stored, error


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

"""Vectors for staged rows: reused by content hash when known, else embedded in one batched
call whose failures are counted in the rows' reports (the rows are stored without a vector);
and vectors for stored rows without one (``embed_and_store``).

A call with a ``deadline`` (a memory-file write's budget, ``retrieval.file_budget``) hands
it to the provider (``embedding_provider.embed_each_of``), which sends no request once it
has passed; the texts it did not send are counted as ``deferred``, not failed, and their
rows are left to the background worker.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, NamedTuple

from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import VectorDimensionError
from memstrata.logs import log_event
from memstrata.retrieval.breaker import bulk_owner
from memstrata.retrieval.embedding_failures import ServerStoppingError
from memstrata.retrieval.embedding_provider import (
    EmbeddingDeferredError,
    EmbeddingProvider,
    embed_each_of,
)
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
    deadline: float | None = None,
    guard: Callable[[], None] | None = None,
) -> tuple[dict[str, list[float]], set[str]]:
    """Vectors by content hash: reused when known, else embedded in one batched call
    (or, when not ``embed``, left to the background worker and counted as deferred; with
    a ``deadline`` on ``time.monotonic()``, those not sent by then likewise); and the
    content hashes whose embedding failed. ``guard`` is asked before the call (a provider
    without the bulk lane's own check before each request, ``breaker.bulk_owner``)."""
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
    if guard is not None:
        guard()
    started = time.perf_counter()
    got = embed_passages(embedder, list(todo.values()), user_id, deadline)
    seconds = time.perf_counter() - started
    embedded = {h: v for h, v in zip(todo, got.vectors, strict=True) if v is not None}
    unsent = {h for h, later in zip(todo, got.deferred, strict=True) if later}
    missed = set(todo).difference(embedded, unsent)
    failed = Counter(n for n, row in pending if row.content_hash in missed)
    later = Counter(n for n, row in pending if row.content_hash in unsent)
    for n, count in per_report.items():
        reports[n].embed_seconds = seconds / len(per_report)
        reports[n].embedding_failed += failed[n]
        reports[n].deferred += later[n]
        reports[n].embedded += count - failed[n] - later[n]
        if failed[n]:
            reports[n].warnings.append(got.error)
    vectors.update(embedded)
    return vectors, missed


def embed_and_store(
    sessions: sessionmaker[Session],
    embedder: EmbeddingProvider,
    user_id: str,
    rows: Sequence[StoredChunk],
    guard: Callable[[], None] | None = None,
) -> tuple[set[int], int, str]:
    """Embed stored rows' texts on the user's turn of the embedding API (breaker.Lanes),
    outside any transaction, then give each row its vector under the user's lock with
    ``replace_vectors``: rows are immutable, so a row still there holds the text embedded,
    and a row a writer replaced meanwhile is skipped. Returns the ids embedded, the rows
    written and the error of the texts that failed ("" when none did). ``guard``: as for
    ``vectors_for``, before each request."""
    if guard is not None:
        guard()
    with bulk_owner(user_id, guard):
        outcome = embed_passages(embedder, [c.chunk_text for c in rows], user_id)
    got = {c.id: v for c, v in zip(rows, outcome.vectors, strict=True) if v is not None}
    if not got:
        return set(), 0, outcome.error
    with transaction(sessions) as session:
        repo = EmbeddingRepository(session, user_id)
        repo.lock()
        stored = repo.replace_vectors(got, embedder.name)
    return set(got), stored, outcome.error


class Passages(NamedTuple):
    """One call's outcome for its texts, in order."""

    vectors: list[list[float] | None]  # None: the text failed, or was deferred
    deferred: list[bool]  # not sent before the call's deadline: nothing failed
    error: str  # what the caller is told of the texts that failed ("" when none did)


def embed_passages(
    embedder: EmbeddingProvider, texts: list[str], user_id: str, deadline: float | None = None
) -> Passages:
    """Each text's vector (the provider's ``embed_each`` isolates bad texts), with a
    ``deadline`` (``time.monotonic()``) past which none is sent; the rows of texts that
    failed or were deferred are stored without a vector and embedded later."""
    results: list[Any]
    try:
        results = embed_each_of(embedder, texts, "passage", deadline=deadline)
    except VectorDimensionError as exc:  # a provider that checks its own vectors
        results = [exc] * len(texts)
    vectors: list[list[float] | None] = []
    deferred = [isinstance(r, EmbeddingDeferredError) for r in results]
    errors: list[str] = []
    kinds: list[str] = []
    for result, later in zip(results, deferred, strict=True):
        if isinstance(result, list):
            try:
                pad_vector(result)  # validates length and finiteness before storing
                vectors.append(result)
                continue
            except VectorDimensionError as exc:
                result = exc
        vectors.append(None)
        if not later:
            errors.append(str(result))
            kinds.append(type(result).__name__)
    if not errors:
        return Passages(vectors, deferred, "")
    sent = len(texts) - sum(deferred)
    stopping = all(kind == ServerStoppingError.__name__ for kind in kinds)
    if stopping and _first_after_drain(embedder):
        log_event(
            logger,
            "embedding.after_drain",
            logging.WARNING,
            user_id=user_id,
            model=embedder.name,
            effect="drain() stopped the passage embeddings for good: this write and every "
            "later one of this runtime store their text without vectors (found by BM25; "
            "the background worker of the next runtime on this database embeds them); "
            "drain only to shut down",
        )
    log_event(
        logger,
        "embedding.failed",
        logging.INFO if stopping else logging.WARNING,
        user_id=user_id,
        model=embedder.name,
        batch_size=sent,
        failed=len(errors),
        error=errors[0],
    )
    # The caller (an end user, an agent) learns what happened and the error's kind; the
    # cause, which names the embedding API's address, goes to the log above only.
    message = (
        f"embedding failed for {len(errors)} of {sent} text(s), stored without "
        f"vectors (BM25 only until re-embedded; {kinds[0]})"
    )
    return Passages(vectors, deferred, message)


# The embedders whose writes after ``drain()`` (``stop_bulk``) were said at WARNING once:
# each write's own record is INFO then, not one warning per write until the process ends.
_DRAINED: weakref.WeakSet[object] = weakref.WeakSet()


def _first_after_drain(embedder: EmbeddingProvider) -> bool:
    if embedder in _DRAINED:
        return False
    with suppress(TypeError):  # a provider that takes no weak reference: warn each time
        _DRAINED.add(embedder)
    return True

"""Vectors for staged rows: reused by content hash when known, else embedded in one batched
call whose failures are counted in the rows' reports (the rows are stored without a vector);
and vectors for stored rows without one (``embed_and_store``).

A call with a ``deadline`` (a memory-file write's budget, where the background worker runs)
sends its requests one at a time and sends none once the deadline has passed: the request
in flight ends, the texts not sent are left to the worker (``deferred``). Its requests are
the client's own (``embedding_plan.batches``), in the texts' order, each in the user's turn
of the passage lane as before; a request small enough for the express slot goes together
with its neighbour, so cutting the call never turns a big write into small express ones.
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
from memstrata.retrieval.embedding_plan import batches
from memstrata.retrieval.embeddings import (
    Embedded,
    EmbeddingOutageError,
    EmbeddingProvider,
    OpenAICompatibleEmbedder,
)
from memstrata.retrieval.records import NewChunk, StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.staging import IndexReport
from memstrata.retrieval.tokenize import count_tokens
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
) -> tuple[dict[str, list[float]], set[str]]:
    """Vectors by content hash: reused when known, else embedded in one batched call
    (or, when not ``embed``, left to the background worker and counted as deferred; with
    a ``deadline`` on ``time.monotonic()``, those not sent by then likewise); and the
    content hashes whose embedding failed."""
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
    got, error = embed_passages(embedder, list(todo.values()), user_id, deadline)
    seconds = time.perf_counter() - started
    sent = list(todo)[: len(got)]
    embedded = {h: v for h, v in zip(sent, got, strict=True) if v is not None}
    unsent = set(todo).difference(sent)
    failed = Counter(
        n
        for n, row in pending
        if row.content_hash in todo
        and row.content_hash not in unsent
        and row.content_hash not in embedded
    )
    later = Counter(n for n, row in pending if row.content_hash in unsent)
    for n, count in per_report.items():
        reports[n].embed_seconds = seconds / len(per_report)
        reports[n].embedding_failed += failed[n]
        reports[n].deferred += later[n]
        reports[n].embedded += count - failed[n] - later[n]
        if failed[n]:
            reports[n].warnings.append(error)
    vectors.update(embedded)
    missed = set(sent).difference(embedded) if len(embedded) < len(sent) else set()
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


def request_ends(embedder: OpenAICompatibleEmbedder, texts: Sequence[str]) -> list[int]:
    """Where each of ``texts``' calls under a deadline ends: the client's requests
    (``batches``), except that one it would send on the express slot alone (at most
    ``express_tokens``, where the lane has that slot) goes with the next, or the last with
    the one before: a big write's passages wait their turn in the passage lane."""
    tokens = [count_tokens(t) for t in texts]
    groups = batches(tokens, embedder.batch_size, embedder.batch_tokens)
    express = embedder.lanes.express_slots > 0
    ends: list[int] = []
    alone = False  # the call ending at ends[-1] would go express on its own
    for group in groups:
        small = express and sum(tokens[i] for i in group) <= embedder.express_tokens
        if ends and alone:
            ends[-1] = group[-1] + 1
            alone = False
        else:
            ends.append(group[-1] + 1)
            alone = small
    if alone and len(ends) > 1:
        ends.pop(-2)
    return ends


def embed_passages(
    embedder: EmbeddingProvider, texts: list[str], user_id: str, deadline: float | None = None
) -> tuple[list[list[float] | None], str]:
    """One vector or None per text sent. An embedder with ``embed_each`` isolates bad
    texts; the rows of failed texts are stored without a vector and healed later. With a
    ``deadline`` (``time.monotonic()``), an ``OpenAICompatibleEmbedder`` sends no request
    once it has passed: the list then ends with the last text sent."""
    results = _results(embedder, texts, deadline)
    texts = texts[: len(results)]
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


def _results(embedder: EmbeddingProvider, texts: list[str], deadline: float | None) -> list[Any]:
    """Each text's vector or error, for the texts sent before ``deadline``."""
    if deadline is not None and isinstance(embedder, OpenAICompatibleEmbedder) and texts:
        results: list[Embedded] = []
        for end in request_ends(embedder, texts):
            if time.monotonic() >= deadline:
                break
            got = embedder.embed_each(texts[len(results) : end], "passage")
            results.extend(got)
            outage = next((r for r in got if isinstance(r, EmbeddingOutageError)), None)
            if outage is not None:  # as embed_each does: the rest would meet it too
                return results + [outage] * (len(texts) - len(results))
        return results
    each = getattr(embedder, "embed_each", None)
    try:
        answers = each(texts, "passage") if each is not None else embedder.embed(texts, "passage")
        if len(answers) != len(texts):
            raise EmbeddingError(f"got {len(answers)} vectors for {len(texts)} texts")
    except (EmbeddingError, VectorDimensionError) as exc:
        return [exc] * len(texts)
    return list(answers)

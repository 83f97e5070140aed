"""Staging a write's docs: which rows stay as they are, which are inserted, and the
vectors of those to embed (``Indexer`` applies the staging in its transaction).

Rows are matched to the stored ones by (path, position, content hash): a match that is
still fresh is kept, and re-embedded in place when it has no vector of the model yet; the
rest are inserted, with a vector reused by content hash when a stored row has one (copied
in the database when applied), else embedded here in one batched call on the user's turn
of the embedding API, within the write's ``deadline`` when it has one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from sqlalchemy.orm import Session

from memstrata.retrieval.breaker import bulk_owner
from memstrata.retrieval.embedding_provider import EmbeddingProvider, lane_guard
from memstrata.retrieval.passage_vectors import vectors_for
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Doc
from memstrata.retrieval.staging import IndexReport, StagedIndex, content_hash, has_vector, is_fresh
from memstrata.retrieval.terms import encode_terms, round_day


def stage_docs(
    reading_in: AbstractContextManager[Session],
    embedder: EmbeddingProvider | None,
    user_id: str,
    docs: Sequence[Doc],
    embed: bool = True,
    *,
    reuse: dict[str, list[float]] | None = None,
    deadline: float | None = None,
    guard: Callable[[], None] | None = None,
) -> StagedIndex:
    """The staging of ``docs`` against ``user_id``'s stored rows, read in ``reading_in``
    (a session of the caller's, or a short one); embedded unless ``embed`` is False.
    ``guard`` is called before each embedding request and ends the staging with what it
    raises (``breaker.bulk_owner``)."""
    reports = [IndexReport(file_path=d.file_path, chunks=len(d.texts)) for d in docs]
    paths = [d.file_path for d in docs]
    # No vectors read: a row whose text is stored with a vector already (kept, or
    # moved to another position) gets that vector copied in the database when applied
    # (StagedIndex.apply). Reading them all as text was most of a write to a file of
    # many chunks (docs/BENCHMARKS.md, "A long-lived user's MEMORY.md").
    with reading_in as reading:
        existing = EmbeddingRepository(reading, user_id).chunks_for_paths(paths)
    model = embedder.name if embedder is not None else None
    stored = {c.content_hash for c in existing if has_vector(c, model)}
    by_slot = {(c.file_path, c.chunk_index, c.content_hash): c for c in existing}

    kept: list[tuple[int, NewChunk]] = []  # rows expected to stay as they are
    pending: list[tuple[int, NewChunk]] = []  # (report index, row to insert), in order
    refill: list[tuple[int, NewChunk]] = []  # kept rows still without a vector
    refill_at: set[int] = set()  # their places in ``kept``
    for n, doc in enumerate(docs):
        for i, body in enumerate(doc.texts):
            digest = content_hash(body)
            row = NewChunk(
                file_path=doc.file_path,
                chunk_index=i,
                chunk_text=body,
                content_hash=digest,
                created_at=doc.created_at,
                source_ids=doc.source_ids,
                context=doc.contexts[i] if doc.contexts else None,
            )
            current = by_slot.get((doc.file_path, i, digest))
            if current is not None and is_fresh(current, doc.created_at):
                kept.append((n, row))
                if embed and model is not None and not has_vector(current, model):
                    refill.append((n, row))  # embedded into the kept row
                    refill_at.add(len(kept) - 1)
                continue
            # Terms only for rows to insert, and here, not inside the transaction. A kept
            # row is only inserted if a concurrent writer replaced it meanwhile; the
            # repository makes its terms then.
            terms = encode_terms(body, round_day(row.file_path, row.created_at))
            pending.append((n, replace(row, bm25_terms=terms)))

    new = [(n, row) for n, row in pending if row.content_hash not in stored] + refill
    # The user's turn of the embedding API: one user's import must not stall another
    # user's write behind its queued requests (breaker.Lanes). A write whose deadline ends
    # while it waits there (its client gone) leaves the queue unsent.
    with bulk_owner(user_id, lane_guard(guard, deadline)):
        vectors, missed = vectors_for(
            embedder, user_id, new, reuse or {}, reports, embed, deadline, guard
        )
    embedded = [
        (
            n,
            replace(
                row,
                embedding=vectors.get(row.content_hash),
                embedding_model=model if row.content_hash in vectors else None,
            ),
        )
        for n, row in pending
    ]
    filled = {i for i in refill_at if kept[i][1].content_hash in vectors}
    for i in filled:
        n, r = kept[i]
        kept[i] = (n, replace(r, embedding=vectors[r.content_hash], embedding_model=model))
    may_change = bool(pending) or len(kept) != len(existing) or bool(filled)
    # Nothing failed (the usual case): not a pass over the rows.
    failed = (
        {(r.file_path, r.content_hash) for _, r in new if r.content_hash in missed}
        if missed
        else set()
    )
    return StagedIndex(user_id, paths, model, kept + embedded, reports, may_change, failed=failed)

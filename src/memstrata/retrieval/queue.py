"""The re-embedding queue: memstrata's ONLY cross-user queries.

Every other query in memstrata is scoped to one user in its repository. These are not,
by design, and are listed here so a scale-out review finds them in one place:

1. ``claim``: take up to ``n`` rows of any user that lack a vector for the current model
   (NULL after an outage or a timeout, or a vector from another model after a model
   change), with ``FOR UPDATE SKIP LOCKED`` and a lease, so several replicas share the work
   and none embeds a row twice.
2. ``release`` / ``record_failures``: give claimed rows back (API down) or record a
   failed attempt / a permanent error, by row id.
3. ``backlog``: count pending rows and the age of the oldest, for ``/metrics`` and
   ``/readyz``.

Writing the vectors back is per user again (``EmbeddingRepository``, under the user's
lock), because a vector changes the user's search index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from memstrata.db.distribution import cross_user_tag

# Rows that need a vector for ``:model`` and have not been given up on.
_PENDING = (
    "(embedding IS NULL OR embedding_model IS DISTINCT FROM :model) AND embedding_error IS NULL"
)


@dataclass(frozen=True)
class Claimed:
    id: int
    user_id: str
    chunk_text: str
    attempts: int


@dataclass(frozen=True)
class Backlog:
    pending: int
    oldest_age_s: float
    failed: int


def claim(session: Session, model: str, n: int, lease_s: float) -> list[Claimed]:
    """Cross-user: lease up to ``n`` pending rows (oldest first) for ``lease_s`` seconds."""
    rows = session.execute(
        text(
            cross_user_tag("embedding_queue.claim")
            + " UPDATE memory_embeddings SET embedding_claimed_until = "
            "now() + make_interval(secs => :lease) "
            "WHERE id IN (SELECT id FROM memory_embeddings WHERE " + _PENDING + " AND "
            "(embedding_claimed_until IS NULL OR embedding_claimed_until < now()) "
            "ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED) "
            "RETURNING id, user_id, chunk_text, embedding_attempts"
        ),
        {"model": model, "n": n, "lease": lease_s},
    ).all()
    return sorted(
        (Claimed(r.id, r.user_id, r.chunk_text, r.embedding_attempts) for r in rows),
        key=lambda c: c.id,
    )


def release(session: Session, ids: Sequence[int], after_s: float) -> None:
    """Cross-user by id: claimed rows become claimable again after ``after_s`` seconds."""
    if ids:
        session.execute(
            text(
                cross_user_tag("embedding_queue.release")
                + " UPDATE memory_embeddings SET embedding_claimed_until = "
                "now() + make_interval(secs => :after) WHERE id = ANY(:ids)"
            ).bindparams(bindparam("ids", type_=None)),
            {"ids": list(ids), "after": after_s},
        )


def record_failures(
    session: Session, failures: Sequence[tuple[int, str | None]], retry_after_s: float
) -> None:
    """Cross-user by id: one more failed attempt each; a non-None error marks the row as
    never to be retried (``embedding_error``)."""
    for row_id, error in failures:
        session.execute(
            text(
                cross_user_tag("embedding_queue.record_failures")
                + " UPDATE memory_embeddings SET embedding_attempts = embedding_attempts + 1, "
                "embedding_error = :error, "
                "embedding_claimed_until = now() + make_interval(secs => :after) "
                "WHERE id = :id"
            ),
            {
                "id": row_id,
                "error": None if error is None else error[:2000],
                "after": retry_after_s,
            },
        )


def backlog(session: Session, model: str) -> Backlog:
    """Cross-user: pending rows, the age of the oldest (seconds since written), failures."""
    row = session.execute(
        text(
            cross_user_tag("embedding_queue.backlog")
            + " SELECT count(*) FILTER (WHERE "
            + _PENDING
            + ") AS pending, "
            "coalesce(extract(epoch FROM now() - min(inserted_at) FILTER (WHERE "
            + _PENDING
            + ")), 0) AS oldest, "
            "count(*) FILTER (WHERE embedding_error IS NOT NULL) AS failed "
            "FROM memory_embeddings"
        ),
        {"model": model},
    ).one()
    return Backlog(int(row.pending), float(row.oldest), int(row.failed))

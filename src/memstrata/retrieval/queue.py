"""The re-embedding queue: memstrata's cross-user queries on the request and worker paths.

Every other query in memstrata is scoped to one user in its repository, but for one
maintenance statement run by hand (``retrieval.backfill``, ``memstrata snapshots``).
These are not, by design, and are listed here so a scale-out review finds them in one
place (all of them are named in ``db.distribution.CROSS_USER_QUERIES``):

1. ``claim``: take up to ``n`` rows of any user that lack a vector for the current model
   (NULL after an outage or a timeout, deferred by an import, or a vector from another
   model after a model change), users in turn, with ``FOR UPDATE SKIP LOCKED`` and a
   lease, so several replicas share the work and none embeds a row twice.
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

# Rows that need a vector for ``:model`` and have not been given up on. "Another model"
# is spelled ``< :model OR > :model`` rather than ``IS DISTINCT FROM :model`` so each arm
# is an index range (``ix_memory_embeddings_pending`` / ``_model``, migration 0006): with
# ``IS DISTINCT FROM`` every probe and every claim read the whole table (docs/BENCHMARKS.md).
_PENDING = (
    "embedding_error IS NULL AND (embedding IS NULL OR embedding_model IS NULL"
    " OR embedding_model < :model OR embedding_model > :model)"
)
# ... and that no worker holds (a lease ends when a worker dies mid-batch).
_UNCLAIMED = "(embedding_claimed_until IS NULL OR embedding_claimed_until < now())"


@dataclass(frozen=True)
class Claimed:
    id: int
    user_id: str
    chunk_text: str
    attempts: int


# ``backlog`` counts pending rows up to this many. A backlog larger than that (a model
# change leaves every row pending) cannot be counted within a probe's timeout; the count
# then reads this value until the backlog drops below it.
BACKLOG_COUNT_LIMIT = 100_000


@dataclass(frozen=True)
class Backlog:
    pending: int  # at most BACKLOG_COUNT_LIMIT
    oldest_age_s: float
    failed: int


def claim(session: Session, model: str, n: int, lease_s: float) -> list[Claimed]:
    """Cross-user: lease up to ``n`` pending rows for ``lease_s`` seconds. Every user with
    pending rows (up to ``n`` users, oldest first) gets an equal share, each user's oldest
    rows first, and what the shares leave goes to the oldest rows of anyone — so one
    user's large backlog (an import with deferred embedding) does not hold up another
    user's row. Rows another worker holds are skipped (``SKIP LOCKED``), never waited for."""
    params: dict[str, object] = {"model": model}
    users = list(
        session.execute(
            text(
                cross_user_tag("embedding_queue.users")
                + f" SELECT user_id FROM memory_embeddings WHERE {_PENDING} AND {_UNCLAIMED}"
                " GROUP BY user_id ORDER BY min(id) LIMIT :n"
            ),
            {**params, "n": n},
        ).scalars()
    )
    if not users:
        return []
    share = max(1, n // len(users))
    ids: list[int] = []
    for user in users:
        ids += session.execute(
            text(
                f"SELECT id FROM memory_embeddings WHERE user_id = :u AND {_PENDING} AND "
                f"{_UNCLAIMED} ORDER BY id LIMIT :k FOR UPDATE SKIP LOCKED"
            ),
            {**params, "u": user, "k": min(share, n - len(ids))},
        ).scalars()
        if len(ids) >= n:
            break
    if len(ids) < n:
        ids += session.execute(
            text(
                cross_user_tag("embedding_queue.claim")
                + f" SELECT id FROM memory_embeddings WHERE {_PENDING} AND {_UNCLAIMED}"
                # ``id + 0``: ordered by ``id`` the planner walks the primary key from the
                # lowest id, reading every finished row before the few pending (newest) ones
                " AND NOT (id = ANY(:taken)) ORDER BY id + 0 LIMIT :k FOR UPDATE SKIP LOCKED"
            ).bindparams(bindparam("taken", type_=None)),
            {**params, "taken": ids, "k": n - len(ids)},
        ).scalars()
    if not ids:
        return []
    rows = session.execute(
        text(
            cross_user_tag("embedding_queue.claim")
            + " UPDATE memory_embeddings SET embedding_claimed_until = "
            "now() + make_interval(secs => :lease) WHERE id = ANY(:ids) "
            "RETURNING id, user_id, chunk_text, embedding_attempts"
        ).bindparams(bindparam("ids", type_=None)),
        {"ids": ids, "lease": lease_s},
    ).all()
    return sorted(
        (Claimed(r.id, r.user_id, r.chunk_text, r.embedding_attempts) for r in rows),
        key=lambda c: c.id,
    )


def pending_for(session: Session, user_id: str, model: str) -> int:
    """One user's rows still waiting for a vector (not cross-user)."""
    return int(
        session.execute(
            text(f"SELECT count(*) FROM memory_embeddings WHERE user_id = :u AND {_PENDING}"),
            {"u": user_id, "model": model},
        ).scalar_one()
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


def backlog(session: Session, model: str, limit: int = BACKLOG_COUNT_LIMIT) -> Backlog:
    """Cross-user: pending rows (counted up to ``limit``), the age of the oldest of them
    (seconds since written; exact below the limit), failures. Each part reads an index,
    so a probe costs the backlog's size, not the table's."""
    row = session.execute(
        text(
            cross_user_tag("embedding_queue.backlog")
            + " SELECT p.pending, coalesce(extract(epoch FROM now() - p.oldest), 0) AS oldest, "
            "(SELECT count(*) FROM memory_embeddings WHERE embedding_error IS NOT NULL) AS failed"
            " FROM (SELECT count(*) AS pending, min(inserted_at) AS oldest FROM (SELECT "
            f"inserted_at FROM memory_embeddings WHERE {_PENDING} LIMIT :limit) AS l) AS p"
        ),
        {"model": model, "limit": limit},
    ).one()
    return Backlog(int(row.pending), max(0.0, float(row.oldest)), int(row.failed))

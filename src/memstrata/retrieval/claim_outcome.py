"""How a re-embedding claim ends for its rows that got no vector.

``sort_results`` reads one claim's embedding answers: which vectors to write back, which
rows failed (one more attempt, or given up on), which to give back uncounted. ``release``
and ``record_failures`` write that to the queue: cross-user statements by row id, like
the rest of the queue (:mod:`memstrata.retrieval.queue`; named in
``db.distribution.CROSS_USER_QUERIES``), that touch only the rows the claim still holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from memstrata.db.distribution import cross_user_tag
from memstrata.errors import EmbeddingRejectedError, VectorDimensionError
from memstrata.retrieval.claimer import PAUSED
from memstrata.retrieval.embeddings import EmbeddingOutageError
from memstrata.retrieval.queue import Claimed
from memstrata.retrieval.vector import pad_vector


def sort_results(
    todo: Sequence[Claimed], results: Sequence[object], max_attempts: int
) -> tuple[dict[int, list[float]], list[tuple[int, str | None]], list[int]]:
    """What one claim's embedding answers mean for its rows: the usable ``vectors`` by row
    id; the ``failures`` (row id, the error when the row is given up on, else ``None``: one
    more attempt counted); the rows to ``release`` uncounted, because the API was down
    (an outage, or no text of the claim succeeded) and it was not the text's fault."""
    vectors: dict[int, list[float]] = {}
    failures: list[tuple[int, str | None]] = []
    release: list[int] = []
    any_success = any(isinstance(r, list) for r in results)
    for claimed, result in zip(todo, results, strict=True):
        if isinstance(result, list):
            try:
                pad_vector(result)
            except VectorDimensionError as exc:
                failures.append((claimed.id, f"unusable vector: {exc}"))
            else:
                vectors[claimed.id] = result
        elif isinstance(result, EmbeddingRejectedError):
            failures.append((claimed.id, str(result)))
        elif isinstance(result, EmbeddingOutageError) or not any_success:
            release.append(claimed.id)
        elif claimed.attempts + 1 >= max_attempts:
            failures.append(
                (claimed.id, f"gave up after {claimed.attempts + 1} attempts: {result}")
            )
        else:
            failures.append((claimed.id, None))
    return vectors, failures, release


# The rows a release or a failure touches: still held by the claim that took them (its
# ``claimed_by``), not taken over by another worker since (a lease that ran out, a worker
# that stopped and gave them back while its batch was still being embedded).
_STILL_HELD = "embedding_claimed_by IS NOT DISTINCT FROM CAST(:claimer AS integer)"


def release(
    session: Session, ids: Sequence[int], after_s: float, claimer: int | None = None
) -> None:
    """Cross-user by id: rows claimed with ``claimer`` become claimable again after
    ``after_s`` seconds (a pause no worker holds: ``claimer.PAUSED``)."""
    if ids:
        session.execute(
            text(
                cross_user_tag("embedding_queue.release")
                + " UPDATE memory_embeddings SET embedding_claimed_until = "
                f"now() + make_interval(secs => :after), embedding_claimed_by = {PAUSED} "
                f"WHERE id = ANY(:ids) AND {_STILL_HELD}"
            ).bindparams(bindparam("ids", type_=None)),
            {"ids": list(ids), "after": after_s, "claimer": claimer},
        )


def record_failures(
    session: Session,
    failures: Sequence[tuple[int, str | None]],
    retry_after_s: float,
    claimer: int | None = None,
) -> None:
    """Cross-user by id, rows claimed with ``claimer``: one more failed attempt each; a
    non-None error marks the row as never to be retried (``embedding_error``); the others
    wait ``retry_after_s`` (a pause, ``claimer.PAUSED``)."""
    for row_id, error in failures:
        session.execute(
            text(
                cross_user_tag("embedding_queue.record_failures")
                + " UPDATE memory_embeddings SET embedding_attempts = embedding_attempts + 1, "
                "embedding_error = :error, embedding_claimed_by = CASE WHEN CAST(:error AS "
                f"text) IS NULL THEN {PAUSED} END, "
                "embedding_claimed_until = now() + make_interval(secs => :after) "
                f"WHERE id = :id AND {_STILL_HELD}"
            ),
            {
                "claimer": claimer,
                "id": row_id,
                "error": None if error is None else error[:2000],
                "after": retry_after_s,
            },
        )

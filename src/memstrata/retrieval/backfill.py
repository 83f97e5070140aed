"""Index snapshots for the users that lack one: ``memstrata snapshots`` (maintenance).

A user's first search loads their index from a snapshot when there is one (~0.15 s at 10k
rows over HTTP) and from every row when there is none (~0.4 s; docs/BENCHMARKS.md). Loads
write the snapshots they find missing, so the table fills by itself — but only as each
large user comes back, each paying the slow load once: after upgrading from a release
without snapshots, and after a database crash, which empties the UNLOGGED table. This
writes them ahead of that, one user at a time, with the same load and the same writer as
a search (so the same snapshot a search would have written). ``memstrata serve`` makes the
same pass in the background after it starts (``retrieval.snapshot_backfill``).

Several processes may make it at once (replicas starting together, an operator's command
beside them): each user is claimed with a transaction-scoped advisory lock taken without
waiting, and counted again under it, so a user another process is writing, or has written
since the list was made, is skipped rather than loaded twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.distribution import cross_user_tag
from memstrata.retrieval import snapshot
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.records import SESSION_PREFIX
from memstrata.retrieval.snapshot_repository import SnapshotRepository

# A user's load and snapshot write in this process may take this long at most.
_WRITE_TIMEOUT_S = 600.0
# How often that wait looks whether the pass was stopped.
_STOP_POLL_S = 0.1


@dataclass(frozen=True)
class Backfilled:
    users: int  # users that lacked a snapshot (or had one missing ``min_rows`` rows or more)
    written: int  # snapshots stored
    failed: int  # writes that raised (logged as index.snapshot.failed)
    # Of ``users``: claimed by another process, or with a current snapshot by their turn.
    skipped: int = 0
    stopped: bool = False  # ``stop`` was set before every user had their turn


def users_without_snapshot(
    session: Session, model: str | None, min_rows: int
) -> list[tuple[str, int]]:
    """Cross-user: each user whose conversation rows outside their snapshot for ``model``
    (all of them when there is none, or one in another format) number ``min_rows`` or
    more — the rule by which a load writes one — with that count, largest first."""
    rows = session.execute(
        text(
            cross_user_tag("index_snapshots.missing")
            + " SELECT e.user_id, count(*) AS n FROM memory_embeddings e"
            " LEFT JOIN memory_index_snapshots s ON s.user_id = e.user_id"
            " AND s.model = :m AND s.format = :f"
            " WHERE e.file_path LIKE :conv AND e.id > COALESCE(s.max_id, 0)"
            " GROUP BY e.user_id HAVING count(*) >= :min ORDER BY n DESC, e.user_id"
        ),
        {
            "m": snapshot.model_key(model),
            "f": snapshot.format_key(),
            "conv": SESSION_PREFIX + "%",
            "min": max(min_rows, 1),
        },
    ).all()
    return [(str(r[0]), int(r[1])) for r in rows]


def write_missing_snapshots(
    sessions: sessionmaker[Session],
    model: str | None,
    min_rows: int,
    progress: Callable[[str, int], None] | None = None,
    *,
    stop: threading.Event | None = None,
) -> Backfilled:
    """Load each such user's index (holding one user at a time) and store its snapshot
    before the next; ``progress(user, rows)`` after each. Once ``stop`` is set the pass
    ends before the next user, and stops waiting for the current user's write."""
    if min_rows <= 0:
        raise ValueError("index snapshots are off (MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS=0)")
    writer = snapshot.SnapshotWriter(sessions, min_rows, settle_s=0.0)
    cache = IndexCache(sessions, max_users=1, snapshots=writer)
    skipped = 0
    try:
        with sessions() as session:
            users = users_without_snapshot(session, model, min_rows)
        for user, rows in users:
            if stop is not None and stop.is_set():
                return Backfilled(len(users), writer.written, writer.failed, skipped, True)
            with _claimed(sessions, user, model, min_rows) as claimed:
                if not claimed:
                    skipped += 1
                    continue
                cache.get(user, model)  # the load schedules the write, as for a search
                if not _written(writer, stop):
                    if stop is not None and stop.is_set():
                        return Backfilled(len(users), writer.written, writer.failed, skipped, True)
                    raise TimeoutError(f"the snapshot of user {user!r} was not written in time")
            if progress is not None:
                progress(user, rows)
        return Backfilled(len(users), writer.written, writer.failed, skipped)
    finally:
        if stop is not None and stop.is_set():
            writer.close(0.0)  # a write under way is left to end (or die) with its thread
        else:
            writer.close()


@contextmanager
def _claimed(
    sessions: sessionmaker[Session], user: str, model: str | None, min_rows: int
) -> Iterator[bool]:
    """Whether this process should write ``user``'s snapshot now: no other process holds
    the user's backfill lock, and the user still has ``min_rows`` rows outside a current
    snapshot. The lock is held until the block ends (the transaction's end releases it,
    a connection lost with its process too)."""
    with sessions() as session, session.begin():
        taken = session.scalar(
            text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"memstrata.snapshot_backfill:{user}"},
        )
        uncovered = 0
        if taken:
            uncovered = SnapshotRepository(session, user).rows_after_snapshot(
                snapshot.model_key(model), snapshot.format_key()
            )
        yield bool(taken) and snapshot.should_write(uncovered, min_rows)


def _written(writer: snapshot.SnapshotWriter, stop: threading.Event | None) -> bool:
    """Wait for the user's snapshot write, but no longer once ``stop`` is set."""
    if stop is None:
        return writer.idle(_WRITE_TIMEOUT_S)
    give_up = time.monotonic() + _WRITE_TIMEOUT_S
    while not stop.is_set() and time.monotonic() < give_up:
        if writer.idle(_STOP_POLL_S):
            return True
    return False

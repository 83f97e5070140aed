"""The re-embedding queue: memstrata's cross-user queries on the request and worker paths.

Every other query in memstrata is scoped to one user in its repository, but for one
maintenance statement run by hand (``retrieval.backfill``, ``memstrata snapshots``).
These are not, by design, and are listed here so a scale-out review finds them in one
place (all of them are named in ``db.distribution.CROSS_USER_QUERIES``):

1. ``claim``: take up to ``n`` rows of any user that lack a vector for the current model
   (NULL after an outage or a timeout, deferred by an import, or a vector from another
   model after a model change), users in turn (``PendingUsers``: which users have rows
   waiting), with ``FOR UPDATE SKIP LOCKED`` and a lease, so several replicas share the
   work and none embeds a row twice. The same statements, with ``WrongLength``, take the
   rows whose vector is of the current model but not of its length. A claim records the
   worker's token beside the lease; ``claimer.reclaim`` takes back, before a claim, the
   rows of claimers whose lock PostgreSQL no longer holds (a worker that died or
   stopped, a ``memstrata reindex`` cut off from its database), so they wait for no
   lease.
2. ``claim_outcome.release`` / ``.record_failures``: give claimed rows back (API down)
   or record a failed attempt / a permanent error, by row id (rows the claim still
   holds); ``claimer.give_back``: a stopping worker's rows, by its token.
3. ``backlog``: count pending rows and the age of the oldest, for ``/metrics`` and
   ``/readyz``; ``stored_lengths``: how many of the model's vectors have each length
   (the worker's once-per-length look at the table, which finds a length that changed
   across a restart and counts the rows of a wrong length into the backlog).

Writing the vectors back is per user again (``EmbeddingRepository``, under the user's
lock), because a vector changes the user's search index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from memstrata.db.distribution import cross_user_tag
from memstrata.retrieval.claimer import LOCK_CLASS, PAUSED, claimed_by_sql

# Rows that need a vector for ``:model`` and have not been given up on. "Another model"
# is spelled ``< :model OR > :model`` rather than ``IS DISTINCT FROM :model`` so each arm
# is an index range (``ix_memory_embeddings_pending`` / ``_model``, migration 0006): with
# ``IS DISTINCT FROM`` every probe and every claim read the whole table (docs/BENCHMARKS.md).
# Rows of a wrong length are not in it: no index covers ``embedding_dim``, so counting them
# here would make every probe read the table again. The worker counts them once per length
# (``stored_lengths``) and adds its count to ``backlog`` (``VectorHealer.backlog``).
_PENDING = (
    "embedding_error IS NULL AND (embedding IS NULL OR embedding_model IS NULL"
    " OR embedding_model < :model OR embedding_model > :model)"
)
# Rows with no vector at all: all a worker embeds while another model is the chosen one.
_MISSING = "embedding_error IS NULL AND embedding IS NULL"
# Rows holding a vector of ``:model`` whose length is wrong (see ``WrongLength``). No index
# covers ``embedding_dim``: the users with such rows are found by reading the table, which
# the healer does once per process and length (``VectorHealer``), not on every probe.
_WRONG_LENGTH = (
    "embedding_error IS NULL AND embedding_model = :model AND (embedding_dim < :below"
    " OR embedding_dim > :above OR embedding_dim = ANY(:stale))"
)
# ... and that no worker holds (a lease ends when a worker dies mid-batch; ``reclaim``
# ends it at once when the worker's lock is gone), nor waits out a retry pause on: what
# a worker may claim.
UNCLAIMED = "(embedding_claimed_until IS NULL OR embedding_claimed_until < now())"
# Rows a claim holds now, a worker's or another reindex's lease: someone is embedding
# them. The one rule of what ``memstrata reindex`` leaves alone and waits for
# (``EmbeddingReads.claim_missing``, ``count_held``). A worker's retry pause
# (``claimer.PAUSED``) is not held: reindex takes those rows at once, where it waited up to
# its 150 s for a worker that was not coming and then exited 1.
HELD = f"(NOT {UNCLAIMED} AND embedding_claimed_by IS DISTINCT FROM {PAUSED})"


@dataclass(frozen=True)
class WrongLength:
    """Which lengths of the current model's stored vectors are wrong: below ``below``,
    above ``above``, or one of ``stale``."""

    below: int
    above: int
    stale: tuple[int, ...] = ()

    def params(self) -> dict[str, Any]:
        return {"below": self.below, "above": self.above, "stale": list(self.stale)}

    def matches(self, dim: int) -> bool:
        """Is ``dim`` one of the wrong lengths (``_WRONG_LENGTH`` in Python)?"""
        return dim < self.below or dim > self.above or dim in self.stale


@dataclass(frozen=True)
class Claimed:
    id: int
    user_id: str
    chunk_text: str
    attempts: int
    claimed_by: int | None = None  # the token the claim recorded (None: the lease alone)


# ``backlog`` counts pending rows up to this many. A backlog larger than that (a model
# change leaves every row pending) cannot be counted within a probe's timeout; the count
# then reads this value until the backlog drops below it.
BACKLOG_COUNT_LIMIT = 100_000


# The backlog is read by /readyz and /metrics, which must answer while the table is
# locked (a migration, a maintenance statement): /readyz did not answer in 20 s then.
BACKLOG_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class Backlog:
    pending: int  # at most BACKLOG_COUNT_LIMIT
    oldest_age_s: float
    failed: int


# Users kept in a ``PendingUsers`` list at most (the first claim statement's LIMIT).
USERS_KEPT = 4096
# A kept list of users is recomputed once it is older than this many times what computing
# it took, so finding the users costs the worker at most 1/REFRESH_FACTOR of its time.
REFRESH_FACTOR = 20.0


class PendingUsers:
    """Whom the next claims serve: the users with rows waiting, oldest first, in turn.

    Finding them groups every pending row by user. That is free in steady state and
    ~0.7 s at a million pending rows (right after a model change), where it ran before
    every claim of 32 rows: most of the database's work while a model change healed
    (docs/BENCHMARKS.md). One worker keeps the list and goes round it until the list is
    older than ``REFRESH_FACTOR`` × its own cost or runs dry; a user who gets rows waiting
    meanwhile is served from the next list. Not thread-safe: one per worker thread."""

    def __init__(
        self,
        refresh_factor: float = REFRESH_FACTOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.refresh_factor = refresh_factor
        self._clock = clock
        self._users: list[str] = []
        self._next = 0
        self._expires = 0.0
        self._scope: tuple[str, str] = ("", "")

    def take(
        self,
        session: Session,
        model: str,
        n: int,
        waiting: str,
        extra: dict[str, Any] | None = None,
    ) -> tuple[list[str], bool]:
        """The next ``n`` users at most with rows matching ``waiting`` (a predicate of
        this module, with ``extra`` parameters besides ``:model``), and whether the list
        was computed just now."""
        scope = (waiting, repr(sorted((extra or {}).items())))
        fresh = not self._users or self._scope != scope or self._clock() >= self._expires
        if fresh:
            self._refresh(session, model, waiting, extra or {})
            self._scope = scope
        picked = self._users[self._next : self._next + n]
        picked += self._users[: min(n - len(picked), self._next)]  # round the end
        if self._users:
            self._next = (self._next + len(picked)) % len(self._users)
        return picked, fresh

    def forget(self, users: Iterable[str]) -> None:
        """Users who had nothing left to claim (done, or leased by another worker)."""
        gone = set(users)
        if gone:
            before = self._users[: self._next]
            self._next -= sum(1 for u in before if u in gone)
            self._users = [u for u in self._users if u not in gone]
            self._next = self._next % len(self._users) if self._users else 0

    def expire(self) -> None:
        self._users, self._next = [], 0

    def _refresh(self, session: Session, model: str, waiting: str, extra: dict[str, Any]) -> None:
        began = self._clock()
        self._users = list(
            session.execute(
                text(
                    cross_user_tag("embedding_queue.users")
                    + f" SELECT user_id FROM memory_embeddings WHERE {waiting} AND "
                    f"{UNCLAIMED} GROUP BY user_id ORDER BY min(id) LIMIT :n"
                ).bindparams(*_array_params(extra)),
                {**extra, "model": model, "n": USERS_KEPT},
            ).scalars()
        )
        self._next = 0
        ended = self._clock()
        self._expires = ended + self.refresh_factor * (ended - began)


def claim(
    session: Session,
    model: str,
    n: int,
    lease_s: float,
    users: PendingUsers | None = None,
    *,
    missing_only: bool = False,
    wrong_length: WrongLength | None = None,
    claimer: int | None = None,
) -> list[Claimed]:
    """Cross-user: lease up to ``n`` pending rows for ``lease_s`` seconds (with
    ``missing_only``, only rows with no vector at all: another model is the chosen one;
    with ``wrong_length``, only rows with a vector of ``model`` of such a length), recording
    ``claimer`` (a token of ``retrieval.claimer``) if its lock is held now — a claimer
    whose lock is gone gets ``claimed_by`` None back and the rows rely on the lease.
    The next users of ``users`` (a fresh list of everyone with pending rows when None)
    get an equal share each, each user's oldest rows first, and what the shares leave
    goes to the users who had more — so one user's large backlog (an import with
    deferred embedding) does not hold up another user's row. Rows another worker holds
    are skipped (``SKIP LOCKED``), never waited for."""
    waiting = _MISSING if missing_only else _PENDING
    extra: dict[str, Any] = {}
    if wrong_length is not None:
        waiting, extra = _WRONG_LENGTH, wrong_length.params()
    turns = users if users is not None else PendingUsers()
    picked, fresh = turns.take(session, model, n, waiting, extra)
    ids = _take(session, model, waiting, extra, turns, picked, n)
    if len(ids) < n and not fresh:  # the kept list ran dry or went out of date
        turns.expire()
        picked, _ = turns.take(session, model, n, waiting, extra)
        ids += _take(session, model, waiting, extra, turns, picked, n - len(ids), taken=ids)
    if not ids:
        return []
    claimed_by = claimed_by_sql(claimer)
    rows = session.execute(
        text(
            cross_user_tag("embedding_queue.claim")
            + " UPDATE memory_embeddings SET embedding_claimed_until = "
            f"now() + make_interval(secs => :lease), embedding_claimed_by = {claimed_by} "
            "WHERE id = ANY(:ids) "
            "RETURNING id, user_id, chunk_text, embedding_attempts, embedding_claimed_by"
        ).bindparams(bindparam("ids", type_=None)),
        {"ids": ids, "lease": lease_s, "claimer": claimer, "cls": LOCK_CLASS},
    ).all()
    return sorted(
        (
            Claimed(r.id, r.user_id, r.chunk_text, r.embedding_attempts, r.embedding_claimed_by)
            for r in rows
        ),
        key=lambda c: c.id,
    )


def _take(
    session: Session,
    model: str,
    waiting: str,
    extra: dict[str, Any],
    turns: PendingUsers,
    users: list[str],
    n: int,
    taken: Sequence[int] = (),
) -> list[int]:
    """Up to ``n`` row ids of ``users``: a share each, then the rest to those who had
    more, in turn. Users with nothing to take leave ``turns``."""
    if not users:
        return []
    share = max(1, n // len(users))
    got: dict[str, list[int]] = {}
    for user in users:
        k = min(share, n - _count(got))
        got[user] = _oldest(session, model, waiting, extra, user, k, taken)
        if _count(got) >= n:
            break
    for user, ids in got.items():
        if _count(got) >= n:
            break
        if len(ids) == share:  # a full share: this user may have more
            ids += _oldest(session, model, waiting, extra, user, n - _count(got), [*taken, *ids])
    turns.forget(user for user, ids in got.items() if not ids)
    return [i for ids in got.values() for i in ids]


def _array_params(extra: dict[str, Any]) -> list[Any]:
    # Lists go to the driver as arrays (``= ANY(:stale)``), as ``:taken`` and ``:ids`` do.
    return [bindparam(name, type_=None) for name, value in extra.items() if isinstance(value, list)]


def _count(got: dict[str, list[int]]) -> int:
    return sum(len(ids) for ids in got.values())


def _oldest(
    session: Session,
    model: str,
    waiting: str,
    extra: dict[str, Any],
    user: str,
    k: int,
    taken: Sequence[int],
) -> list[int]:
    """One user's ``k`` oldest rows matching ``waiting`` that nobody holds, locked (not
    cross-user)."""
    if k <= 0:
        return []
    return list(
        session.execute(
            text(
                f"SELECT id FROM memory_embeddings WHERE user_id = :u AND {waiting} AND "
                f"{UNCLAIMED} AND NOT (id = ANY(:taken)) ORDER BY id LIMIT :k "
                "FOR UPDATE SKIP LOCKED"
            ).bindparams(bindparam("taken", type_=None), *_array_params(extra)),
            {**extra, "model": model, "u": user, "k": k, "taken": list(taken)},
        ).scalars()
    )


# A model counts as running while some worker recorded it within this many seconds (a
# worker records it every round: every MEMSTRATA_EMBEDDING_HEAL_INTERVAL_S when idle, after
# each batch when busy).
MODEL_LIVE_S = 180.0


def announce_model(session: Session, model: str, live_s: float = MODEL_LIVE_S) -> str:
    """Record that a worker of ``model`` runs, and return the model the stored vectors
    move to: of the models running, the one that appeared last (``first_seen``, reset
    when a model comes back after being gone). During a rolling model change that is the
    new model, whichever old replica restarts meanwhile; once every replica of a model is
    gone for ``live_s``, it no longer counts (a rollback, a scaled-down rollout).
    Migration 0007."""
    params = {"model": model, "live": live_s}
    session.execute(
        text(
            "INSERT INTO embedding_models (model, first_seen, seen_at) "
            "VALUES (:model, now(), now()) ON CONFLICT (model) DO UPDATE SET seen_at = now(), "
            "first_seen = CASE WHEN embedding_models.seen_at < now() - make_interval(secs => "
            ":live) THEN now() ELSE embedding_models.first_seen END "
            # Every replica's worker announces every round: the row is written only when its
            # time is a tenth of the live window old, not once per replica every 2 s.
            "WHERE embedding_models.seen_at < now() - make_interval(secs => :fresh)"
        ),
        {**params, "fresh": live_s / 10},
    )
    return str(
        session.execute(
            text(
                "SELECT model FROM embedding_models WHERE seen_at >= now() - "
                "make_interval(secs => :live) ORDER BY first_seen DESC, model LIMIT 1"
            ),
            params,
        ).scalar_one()
    )


def pending_for(session: Session, user_id: str, model: str) -> int:
    """One user's rows still waiting for a vector (not cross-user)."""
    return int(
        session.execute(
            text(f"SELECT count(*) FROM memory_embeddings WHERE user_id = :u AND {_PENDING}"),
            {"u": user_id, "model": model},
        ).scalar_one()
    )


def stored_lengths(session: Session, model: str) -> dict[int, int]:
    """Cross-user: how many vectors of ``model`` (not given up on) have each length. Reads
    every row of the model (no index covers the length: about a second at two million
    rows), so the worker asks once per process and rule, never a probe."""
    rows = session.execute(
        text(
            cross_user_tag("embedding_queue.backlog")
            + " SELECT embedding_dim, count(*) AS n FROM memory_embeddings WHERE "
            "embedding_error IS NULL AND embedding_model = :model AND embedding IS NOT NULL "
            "AND embedding_dim IS NOT NULL GROUP BY embedding_dim"
        ),
        {"model": model},
    ).all()
    return {int(r.embedding_dim): int(r.n) for r in rows}


def backlog(session: Session, model: str, limit: int = BACKLOG_COUNT_LIMIT) -> Backlog:
    """Cross-user: pending rows (counted up to ``limit``), the age of the oldest of them
    (seconds since written; exact below the limit), failures. Each part reads an index,
    so a probe costs the backlog's size, not the table's. Given up after
    ``BACKLOG_TIMEOUT_MS`` (the database's error, e.g. a lock held on the table)."""
    session.execute(text(f"SET LOCAL statement_timeout = {BACKLOG_TIMEOUT_MS}"))
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

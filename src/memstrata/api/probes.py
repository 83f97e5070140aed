"""What ``/readyz`` and ``/metrics`` compute, one run at a time per app (``single_flight``).

``/readyz``: a NEW connection to the database answers (a smart shutdown refuses new
connections while old ones still work, so a pooled one would not notice) and pgvector is
installed — 503 otherwise, the reason logged, not returned; a server with every connection
slot taken is ``"database": "saturated"`` and still ready while a pooled connection
answers, and so is a process whose own pool has every connection in use (answered at once,
the pooled checks left out: the fresh connection showed the server up). A server whose
postmaster alone is stopped (the new connection times out, the database monitor's open
one answers: ``db.not_accepting``) is ``"database": "not_accepting"`` and ready, answered at
once with nothing read, as requests on the pooled connections are served (it answered 503
while they were). While BM25 can
answer it stays 200 and says how the vector side is: ``{"vectors": "degraded", "pending":
163}`` when rows wait for a vector (rows of a wrong length included, as the re-embedding
worker counted them), the embedding circuit is open, or the embedding API has not answered
once in this process (a wrong URL or ``dimensions`` said "ok" until traffic came);
``"embedding"`` tells an outage (``unreachable``: a circuit is open) from a backlog with the
API up (``ok``), and from a server that answers but slower than the timeouts (``slow``,
with ``embedding_slow_s`` and the setting to raise in ``embedding_check``), from the
breakers and what the client saw, without a request of its own. A full
disk keeps it 200 too, as reads still answer, and says so: ``"disk": "full"`` with
``disk_path`` when a local directory memstrata writes has no room, ``"database":
"disk_full"`` when the database refused a statement for a full disk lately
(:mod:`memstrata.db.disk`); before, writes answered "try again shortly" while it said
ready and ok. ``/metrics``: Prometheus text (see :mod:`memstrata.api.metrics`) after
refreshing the backlog gauges, unless every pooled connection is busy or the database
monitor finds the database lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from memstrata.api.schemas import EmbeddingState, Readiness
from memstrata.api.single_flight import SingleFlight
from memstrata.db.disk import DiskWatch
from memstrata.db.engine import check_pgvector
from memstrata.db.monitor import saturated, timed_out
from memstrata.db.pool_watch import pool_full, pool_stats
from memstrata.errors import MemstrataError, PgvectorMissingError
from memstrata.logs import log_event

if TYPE_CHECKING:
    from memstrata.api.context import ApiContext

logger = logging.getLogger(__name__)

# (status code, body) of a readiness answer; (body, content type) of a scrape.
ReadinessAnswer = tuple[int, dict[str, Any]]
Scrape = tuple[bytes, str]


class Probes:
    def __init__(self, context: ApiContext) -> None:
        self._context = context
        self.readiness: SingleFlight[ReadinessAnswer] = SingleFlight(self._readiness)
        self.scrape: SingleFlight[Scrape] = SingleFlight(self._scrape)
        self._full: tuple[Path | None, bool] = (None, False)  # the last answer's disks
        self._pgvector: str | None = None  # the version the last pooled check found
        self._checkouts: PoolProgress | None = None  # the main pool's, at the last probe

    def _readiness(self) -> ReadinessAnswer:
        status, body = self._answer()
        if self._context.ready:
            # Each probe starts a dead background thread again (``worker_watch``).
            told = self._context.mem.check_background()
            if told is not None:
                body |= {"background": told.state, "background_threads": list(told.workers)}
        return status, body

    def _answer(self) -> ReadinessAnswer:
        context = self._context
        if not context.ready:
            return _unready("starting", "unknown")
        mem = context.mem
        path, database_full = self._disks(mem.disk)
        disk = _disk(path)
        error = mem.db.probe()
        # Every connection slot taken: the server is up and this process's pooled
        # connections still work, so it stays in the load balancer (taking every replica
        # out at once would turn a full server into an outage); the pooled check below
        # decides.
        full = error is not None and saturated(error)
        if error is not None and not full and timed_out(error) and mem.db.not_accepting():
            # No pooled read either: one that needs a new connection would wait for its
            # connect_timeout.
            body = Readiness(
                status="ready",
                database="not_accepting",
                pgvector=self._pgvector,
                **self._embedding(),
                **disk,
            )
            return 200, body.answer()
        if error is not None and not full:
            log_event(logger, "health.not_ready", logging.WARNING, reason=error)
            return _unready("unreachable", "unknown", disk)
        progress, self._checkouts = self._checkouts, PoolProgress.of(mem.db.engine)
        if pool_full(mem.db.engine):
            # Every connection of this process's pool is in use (requests queued on one
            # user's lock, or load): the checks below would wait up to POOL_TIMEOUT_S
            # for one and then call the server unreachable, which the fresh connection
            # above just disproved; and every replica of a database whose rows are locked
            # would leave the load balancer at once. Ready, saturated, the rest unread —
            # unless since the last probe checkouts only timed out and none got a
            # connection: then the pool is stuck (connections leaked or hung), not busy.
            if stuck(progress, self._checkouts):
                log_event(logger, "health.not_ready", logging.WARNING, reason="pool_exhausted")
                return _unready("pool_exhausted", self._pgvector or "unknown", disk)
            body = Readiness(
                status="ready",
                database=_database(saturated=True, disk_full=database_full),
                pgvector=self._pgvector,
                **self._embedding(),  # no database read: told here too
                **disk,
            )
            return 200, body.answer()
        try:
            version = check_pgvector(mem.db.engine)
        except PgvectorMissingError as exc:
            log_event(logger, "health.not_ready", logging.WARNING, reason=str(exc))
            return _unready("ok", "missing", disk)
        except (MemstrataError, SQLAlchemyError) as exc:
            log_event(logger, "health.not_ready", logging.WARNING, reason=str(exc))
            return _unready("unreachable", "unknown", disk)
        self._pgvector = version
        vectors, pending = self._vector_state()
        body = Readiness(
            status="ready",
            database=_database(saturated=full, disk_full=database_full),
            pgvector=version,
            vectors=vectors,
            pending=pending,
            **self._embedding(),
            **disk,
        )
        return 200, body.answer()

    def _disks(self, watch: DiskWatch) -> tuple[Path | None, bool]:
        """The full local path (or None) and whether the database refused for a full disk;
        a change is logged once (``health.disk_full`` / ``health.disk_ok``), not on every
        probe."""
        found = watch.full_path(), watch.database_full()
        if found != self._full:
            path, database_full = found
            if path is not None or database_full:
                log_event(
                    logger,
                    "health.disk_full",
                    logging.WARNING,
                    path=None if path is None else str(path),
                    database=database_full,
                )
            else:
                log_event(logger, "health.disk_ok")
            self._full = found
        return found

    def _scrape(self) -> Scrape:
        metrics = self._context.metrics
        metrics.forget_backlog()  # unread (database down, starting): no sample, not the last
        # Not while every pooled connection is busy: the count would wait for one up to
        # POOL_TIMEOUT_S (10 s, Prometheus' default scrape timeout), and the scrape that
        # shows the pool full would time out itself. Nor while the database monitor finds
        # the database lost: a frozen server held each scrape 5–12 s in a drill.
        context = self._context
        if (
            context.ready
            and context.mem.db.up() is not False
            and not pool_full(context.mem.db.engine)
        ):
            self._vector_state()  # reads the backlog for its gauges
        return metrics.render()

    def _embedding(self) -> dict[str, Any]:
        """``embedding``, and ``embedding_check`` (what to fix) while it is misconfigured or
        slow (then with ``embedding_slow_s``)."""
        healer = self._context.mem.healer
        if healer is None:
            return {"embedding": "off"}
        if healer.embedder.frozen():  # before any circuit opens, and never "slow"
            return {"embedding": "unreachable"}
        slow = healer.embedder.slow()
        if slow is not None:
            return {
                "embedding": "slow",
                "embedding_check": slow.check(),
                "embedding_slow_s": slow.waited_s,
            }
        state = self._embedding_state()
        if state != "misconfigured":
            return {"embedding": state}
        return {"embedding": state, "embedding_check": healer.probe.refused_check}

    def _embedding_state(self) -> EmbeddingState:
        """The embedding API as the circuit breakers see it: an outage apart from a
        backlog (``vectors`` is degraded for both). No request of its own — a probe per
        /readyz would be load balancers' traffic on the API — so an API back after an
        outage reads ``unreachable`` until a request (a search, a write, the worker's
        probe) closes the circuit. (``slow`` is told before: ``embedder.slow``.)"""
        healer = self._context.mem.healer
        if healer is None:
            return "off"
        if healer.embedder.circuit_open:
            return "unreachable"
        if healer.embedder.answered:
            return "ok"
        # A configuration the API refused (a wrong `dimensions`): said, not "unproven".
        return "unproven" if healer.probe.refused_check is None else "misconfigured"

    def _vector_state(self) -> tuple[Literal["ok", "degraded", "off"], int | None]:
        """The vector side for /readyz, updating the backlog gauges of /metrics."""
        context = self._context
        healer = context.mem.healer
        if healer is None:
            return "off", None
        try:
            backlog = healer.backlog()
        except SQLAlchemyError:
            return "degraded", None
        circuit_open = healer.embedder.circuit_open or healer.embedder.frozen()
        context.metrics.record_backlog(backlog.pending, backlog.oldest_age_s, backlog.failed)
        unproven = not healer.embedder.answered  # the worker's start-up probe, or any request
        degraded = backlog.pending > 0 or circuit_open or unproven
        return ("degraded" if degraded else "ok"), backlog.pending


@dataclass(frozen=True)
class PoolProgress:
    """How many checkouts of the main pool got a connection, and how many timed out."""

    served: int
    timed_out: int

    @classmethod
    def of(cls, engine: Engine) -> PoolProgress | None:
        stats = pool_stats(engine)
        if stats is None:
            return None
        return cls(stats.checkouts - stats.timeouts, stats.timeouts)


def stuck(before: PoolProgress | None, now: PoolProgress | None) -> bool:
    """Whether, between two probes, the pool's checkouts timed out and none was served."""
    if before is None or now is None:
        return False
    return now.timed_out > before.timed_out and now.served == before.served


def _database(*, saturated: bool, disk_full: bool) -> str:
    """The database's word in a ready answer: a full disk first, it stops the writes."""
    if disk_full:
        return "disk_full"
    return "saturated" if saturated else "ok"


def _disk(path: Path | None) -> dict[str, Any]:
    return {} if path is None else {"disk": "full", "disk_path": str(path)}


def _unready(database: str, pgvector: str, disk: dict[str, Any] | None = None) -> ReadinessAnswer:
    body = Readiness(status="unavailable", database=database, pgvector=pgvector, **(disk or {}))
    return 503, body.answer()

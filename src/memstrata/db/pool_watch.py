"""How full a connection pool is, and how long checkouts wait for one of its connections.

A saturated pool shows first as requests waiting for a connection (up to
``engine.POOL_TIMEOUT_S``, then a 503 ``database_unavailable``) while the database itself
looks idle; ``/metrics`` reads :func:`pool_stats` of each pool at scrape time.

SQLAlchemy's pool events fire once a connection is handed over (``checkout``) or back
(``checkin``); none fires when a checkout starts, so the wait cannot be timed from them.
:class:`WatchedPool` is a ``QueuePool`` that times its own ``_do_get`` instead, and only
when it is about to wait: every connection the pool may open (its size plus overflow) is
open and none is idle. A checkout that finds an idle connection, or room to open one,
counts as no wait at all: opening a connection is the database's time, not the pool's,
and timing it would show a cold pool as a saturated one. The check reads the pool's
counters without its lock, so a checkout that lost a race for the last idle connection
waits uncounted, and one SQLAlchemy retries after losing it counts twice; they are rare,
and a saturated pool is not a race. ``_do_get`` is the method every SQLAlchemy pool class
implements, the one a pool subclass is meant to override. (The pools memstrata makes
always bound their overflow: ``max_overflow=-1``, no bound, is not counted right.)

A checkout that waits is woken only when a connection is handed back. In a freeze none is
until the monitor cuts them, and none at all once the monitor has disposed of the pool (the
waiters stay on the old one): of 45 requests in a freeze, the 30 waiting for one of the 15
connections answered at the pool's timeout or the freeze's end, ~12 s after the stop,
although the monitor knew the server lost after ~5 s. So the pools of one database share a
:class:`CheckoutGate`, which the database monitor closes while it finds the database lost:
closing it wakes every waiting checkout, and each, and any that would start waiting then,
gives up with :class:`CheckoutRefusedError` (503 ``database_unavailable``, as every refusal
while the database is lost). A checkout that need not wait is not refused: it opens its
connection, which is how a request finds a restarted server back before the monitor does
(unless the server is found frozen: ``db.open_connections`` refuses new connections then,
with this error).
"""

from __future__ import annotations

import threading
import time
import weakref
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Engine
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool
from sqlalchemy.util.queue import Empty, Queue

from memstrata.errors import DatabaseUnavailableError

# Upper bounds in seconds of a checkout's wait: a connection handed back by a request's
# short statement comes within milliseconds, one held by a locked write within seconds,
# and POOL_TIMEOUT_S (10 s) ends every wait. Checkouts that did not wait are in each.
WAIT_BUCKETS_S = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The main engine's overflow for each connection of its pool (engine.make_engine): it opens
# up to MEMSTRATA_DB_POOL_SIZE × (1 + OVERFLOW_PER_POOLED) connections at once.
OVERFLOW_PER_POOLED = 2


@dataclass(frozen=True)
class PoolStats:
    """One pool as read now; the checkout counts since its engine was made."""

    in_use: int  # connections checked out
    limit: int  # the most it opens at once: pool size plus overflow
    waiting: int  # checkouts waiting for a connection now
    checkouts: int
    wait_buckets: tuple[int, ...]  # cumulative, one per WAIT_BUCKETS_S bound
    wait_sum_s: float
    timeouts: int  # checkouts that waited POOL_TIMEOUT_S and got none
    refused: int = 0  # waiting checkouts given up while the database was lost (not counted)


class PoolWaits:
    """An engine's checkout counts. They outlive its pool: every ``engine.dispose()``
    (the database monitor's, when PostgreSQL is lost) puts a new pool in its place."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # += on an attribute is no atomic step
        self.checkouts = 0
        self.waiting = 0
        self.waited = [0] * (len(WAIT_BUCKETS_S) + 1)  # per bucket, the last one +Inf
        self.wait_sum_s = 0.0
        self.timeouts = 0
        self.refused = 0

    def no_wait(self) -> None:
        with self._lock:
            self.checkouts += 1

    def wait_started(self) -> None:
        with self._lock:
            self.waiting += 1

    def wait_ended(self, seconds: float, *, timed_out: bool) -> None:
        with self._lock:
            self.waiting -= 1
            self.checkouts += 1
            self.waited[bisect_left(WAIT_BUCKETS_S, seconds)] += 1
            self.wait_sum_s += seconds
            self.timeouts += timed_out

    def wait_refused(self) -> None:
        """A wait the gate ended: no checkout (``/readyz`` reads checkouts less timeouts as
        served), and nothing about the pool's size."""
        with self._lock:
            self.waiting -= 1
            self.refused += 1

    def read(self) -> tuple[int, int, list[int], float, int, int]:
        """Checkouts, waiting, waited per bucket, the waits' sum, timeouts and refusals, at
        once."""
        with self._lock:
            return (
                self.checkouts,
                self.waiting,
                list(self.waited),
                self.wait_sum_s,
                self.timeouts,
                self.refused,
            )


def cumulative_buckets(checkouts: int, waited: list[int]) -> tuple[int, ...]:
    """Prometheus' bucket counts (each one counting every checkout up to its bound) of
    ``checkouts``, of which ``waited`` (per bucket, +Inf last) waited and the rest did not."""
    count = checkouts - sum(waited)
    buckets = []
    for in_bucket in waited[:-1]:
        count += in_bucket
        buckets.append(count)
    return tuple(buckets)


def unavailable(error: str) -> str:
    """What a refusal while the database monitor finds the database lost says."""
    return f"the database is unavailable (db.lost: {error})"


class CheckoutRefusedError(DatabaseUnavailableError, PoolTimeoutError):
    """A checkout waiting for a pooled connection given up because the database is lost,
    or a new connection refused while the server is found frozen.

    The monitor's refusal (``DatabaseUnavailableError``) and, to the workers that treat any
    ``SQLAlchemyError`` as the database away, the pool's own (a timeout, ended early)."""


class CheckoutGate:
    """Shared by the pools of one database: closed, with the monitor's error, while it
    finds the database lost (module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: weakref.WeakSet[GatedQueue] = weakref.WeakSet()
        self.error: str | None = None

    def guard(self, queue: GatedQueue) -> None:
        queue.gate = self
        with self._lock:
            self._queues.add(queue)

    def close(self, error: str) -> None:
        self.error = error
        with self._lock:
            queues = list(self._queues)
        for queue in queues:  # the disposed pools' too: their waiters wait on them
            with queue.not_empty:
                queue.not_empty.notify_all()

    def open(self) -> None:
        self.error = None

    def refuse_if_closed(self) -> None:
        error = self.error
        if error is not None:
            raise CheckoutRefusedError(unavailable(error))


class GatedQueue(Queue[ConnectionPoolEntry]):
    """A pool's queue whose blocking ``get`` also ends when its gate closes:
    SQLAlchemy's ``Queue.get`` with the gate asked before each wait."""

    gate: CheckoutGate | None = None

    def get(self, block: bool = True, timeout: float | None = None) -> ConnectionPoolEntry:
        gate = self.gate
        if not block or timeout is None or gate is None:  # QueuePool always gives one
            return super().get(block, timeout)
        with self.not_empty:
            deadline = time.monotonic() + timeout
            while self._empty():
                gate.refuse_if_closed()
                remaining = deadline - time.monotonic()
                if remaining <= 0.0:
                    raise Empty
                self.not_empty.wait(remaining)
            item = self._get()
            self.not_full.notify()
            return item


class WatchedPool(QueuePool):
    """A ``QueuePool`` that counts its checkouts' waits (module doc)."""

    # SQLAlchemy names a pool's logger after its class's module, which put this one under
    # ``memstrata`` at its INFO level: every dispose (several a second while the database
    # is away) logged "Pool disposed" / "Pool recreating" as memstrata's own lines. It
    # logs where SQLAlchemy's own pools do, quiet unless the operator asks for them.
    _sqla_logger_namespace = "sqlalchemy.pool.impl.QueuePool"
    _queue_class = GatedQueue

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.waits = PoolWaits()
        self.gate: CheckoutGate | None = None

    def guard(self, gate: CheckoutGate) -> None:
        """Have ``gate`` end this pool's waiting checkouts (and its recreations')."""
        self.gate = gate
        gate.guard(cast(GatedQueue, self._pool))

    def recreate(self) -> WatchedPool:
        pool = cast(WatchedPool, super().recreate())
        pool.waits = self.waits
        if self.gate is not None:
            pool.guard(self.gate)
        return pool

    def full(self) -> bool:
        """Whether a checkout now would wait: every connection the pool may open is open,
        and none is idle."""
        return self._overflow >= self._max_overflow and self._pool.empty()

    def _do_get(self) -> ConnectionPoolEntry:
        waits = self.waits
        if not self.full():
            waits.no_wait()
            return super()._do_get()
        started = time.perf_counter()
        waits.wait_started()
        timed_out = refused = False
        try:
            return super()._do_get()
        except CheckoutRefusedError:
            refused = True
            raise
        except PoolTimeoutError:
            timed_out = True
            raise
        finally:
            if refused:
                waits.wait_refused()
            else:
                waits.wait_ended(time.perf_counter() - started, timed_out=timed_out)

    def stats(self) -> PoolStats:
        checkouts, waiting, waited, wait_sum_s, timeouts, refused = self.waits.read()
        return PoolStats(
            in_use=self.checkedout(),
            limit=self.size() + self._max_overflow,
            waiting=waiting,
            checkouts=checkouts,
            wait_buckets=cumulative_buckets(checkouts, waited),
            wait_sum_s=wait_sum_s,
            timeouts=timeouts,
            refused=refused,
        )


def pool_full(engine: Engine) -> bool:
    """Whether a checkout of ``engine``'s pool now would wait (False for a pool that is
    not a :class:`WatchedPool`)."""
    pool = engine.pool
    return isinstance(pool, WatchedPool) and pool.full()


def pool_stats(engine: Engine) -> PoolStats | None:
    """``engine``'s pool now; None when it is not a :class:`WatchedPool`."""
    pool = engine.pool
    return pool.stats() if isinstance(pool, WatchedPool) else None

"""``WatchedPool`` on the session's PostgreSQL: checkouts that find a connection count as
no wait, one that waits for a connection handed back is timed, one that gets none within
the pool timeout is counted as a timeout, and the counts outlive the pool's re-creation
(``engine.dispose()``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from memstrata.db.pool_watch import (
    WAIT_BUCKETS_S,
    PoolStats,
    WatchedPool,
    cumulative_buckets,
    pool_stats,
)
from tests.waiting import wait_for

TIMEOUT_S = 0.3  # for the checkouts meant to time out
# A wait meant to end with a connection handed back: a timeout far over HELD_S, so that a
# loaded machine's slow thread switch is no timeout (a bucket bound, read back below).
WAIT_TIMEOUT_S = 2.5
HELD_S = 0.2


def _engine(pg_url: str, timeout_s: float) -> Engine:
    return create_engine(
        pg_url,
        poolclass=WatchedPool,
        pool_size=1,
        max_overflow=1,
        pool_timeout=timeout_s,
    )


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    made = _engine(pg_url, TIMEOUT_S)
    yield made
    made.dispose()


@pytest.fixture
def patient_engine(pg_url: str) -> Iterator[Engine]:
    made = _engine(pg_url, WAIT_TIMEOUT_S)
    yield made
    made.dispose()


def _stats(engine: Engine) -> PoolStats:
    stats = pool_stats(engine)
    assert stats is not None
    return stats


def _over(stats: PoolStats, bound_s: float) -> int:
    """Checkouts that waited longer than ``bound_s``."""
    return stats.checkouts - stats.wait_buckets[WAIT_BUCKETS_S.index(bound_s)]


def test_a_free_or_openable_connection_is_no_wait(engine: Engine) -> None:
    with engine.connect(), engine.connect():  # the pool's one, then its overflow
        stats = _stats(engine)
    assert (stats.in_use, stats.limit, stats.waiting) == (2, 2, 0)
    assert stats.checkouts == 2 and stats.wait_buckets[0] == 2 and stats.wait_sum_s == 0
    assert _stats(engine).in_use == 0


def test_a_wait_for_a_connection_handed_back_is_timed(patient_engine: Engine) -> None:
    engine = patient_engine
    first, second = engine.connect(), engine.connect()
    seen_waiting: list[int] = []

    def hand_back() -> None:
        # Held HELD_S from when the checkout waits, not from when this thread started: on a
        # loaded machine the main thread reached its wait after part of a sleep begun first.
        wait_for(lambda: _stats(engine).waiting == 1, WAIT_TIMEOUT_S, "a waiting checkout")
        time.sleep(HELD_S)
        seen_waiting.append(_stats(engine).waiting)
        first.close()

    releaser = threading.Thread(target=hand_back)
    releaser.start()
    with engine.connect():  # waits for ``first``
        pass
    releaser.join()
    second.close()
    stats = _stats(engine)
    assert seen_waiting == [1] and stats.waiting == 0
    assert stats.checkouts == 3
    assert _over(stats, 0.1) == 1 and _over(stats, WAIT_TIMEOUT_S) == 0
    assert HELD_S <= stats.wait_sum_s < WAIT_TIMEOUT_S
    assert stats.timeouts == 0


def test_a_checkout_that_gets_no_connection_is_a_timeout(engine: Engine) -> None:
    with engine.connect(), engine.connect(), pytest.raises(PoolTimeoutError):
        engine.connect()
    stats = _stats(engine)
    assert stats.timeouts == 1 and stats.waiting == 0
    assert _over(stats, 0.25) == 1 and stats.wait_sum_s >= TIMEOUT_S


def test_the_counts_outlive_a_dispose(engine: Engine) -> None:
    with engine.connect(), engine.connect(), pytest.raises(PoolTimeoutError):
        engine.connect()
    engine.dispose()  # a new pool, as the database monitor's when PostgreSQL is lost
    with engine.connect():
        stats = _stats(engine)
    assert (stats.checkouts, stats.timeouts, stats.in_use) == (4, 1, 1)


def test_cumulative_buckets_count_the_checkouts_that_did_not_wait_in_each() -> None:
    waited = [0] * (len(WAIT_BUCKETS_S) + 1)
    waited[0], waited[3], waited[-1] = 1, 2, 1  # ≤ 1 ms, ≤ 100 ms, over 10 s
    buckets = cumulative_buckets(10, waited)
    assert buckets[0] == 7  # 6 without a wait and the one of ≤ 1 ms
    assert buckets[2] == 7 and buckets[3] == 9 and buckets[-1] == 9  # +Inf: 10
    assert len(buckets) == len(WAIT_BUCKETS_S)


def test_the_pool_logs_where_sqlalchemys_pools_do(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLAlchemy names a pool's logger after its class: WatchedPool's sat under
    ``memstrata``, whose INFO level it inherited, so every ``dispose()`` (each database
    outage, several a second) logged "Pool disposed" / "Pool recreating" as memstrata's."""
    engine = _engine(pg_url, TIMEOUT_S)
    try:
        # memstrata's own level, as memstrata.logs sets it (restored after the block)
        with caplog.at_level(logging.INFO, logger="memstrata"):
            with engine.connect():
                pass
            engine.dispose()
    finally:
        engine.dispose()
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("memstrata")]
    assert ours == [], ours

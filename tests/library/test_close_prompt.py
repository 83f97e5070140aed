"""``close()`` does not wait out the agent pool listener's poll.

Once ``mem.pool.get`` had run, the pool's LISTEN thread sat in ``conn.notifies(timeout=
poll_s)`` and ``close()`` joined it: up to ``poll_s`` (0.5 s), 200 ms in the drill's runs,
where docs/LIBRARY.md promised 5 ms with a ``database=`` of the caller's. The listener is
now woken at once. A poll of 30 s makes the difference plain whatever the machine's load:
the old join waited the whole 30 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from sqlalchemy import text

from memstrata.agent.pool import AgentPool
from memstrata.db.database import Database
from memstrata.runtime import Memstrata

pytestmark = pytest.mark.timeout(90)


def listeners(db: Database, origin: str) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a"),
                {"a": f"memstrata-pool-{origin}"},
            ).scalar_one()
        )


def test_close_wakes_the_listener_instead_of_waiting_out_its_poll(db: Database) -> None:
    pool: AgentPool[object] = AgentPool(db.engine, poll_s=30.0)
    assert pool.start(timeout_s=20)
    thread = pool._thread
    assert thread is not None
    time.sleep(0.2)  # inside its wait for notifications

    started = time.monotonic()
    pool.close()
    took = time.monotonic() - started

    assert took < 5.0, f"close() took {took:.1f} s"
    assert not thread.is_alive()
    # Its connection closed, not left to the server: the backend leaves pg_stat_activity
    # a moment after the client hangs up, later on a loaded host.
    deadline = time.monotonic() + 10.0
    while listeners(db, pool.origin) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listeners(db, pool.origin) == 0


def test_a_listener_still_hears_another_pools_invalidation(db: Database) -> None:
    """The wait now watches the connection and the wake-up together: a notification
    arriving during a long poll is still taken at once."""
    heard: list[str] = []
    listening: AgentPool[object] = AgentPool(db.engine, poll_s=30.0, on_invalidate=heard.append)
    sender: AgentPool[object] = AgentPool(db.engine)
    try:
        assert listening.start(timeout_s=20)
        listening.get("u1", object)
        sender.invalidate("u1")
        deadline = time.monotonic() + 5.0
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heard == ["u1"]
    finally:
        listening.close()
        sender.close()


def test_a_runtime_on_a_callers_database_closes_promptly_after_the_pool_ran(
    open_runtime: Callable[..., Memstrata],
) -> None:
    took = []
    for _ in range(3):
        mem = open_runtime()
        mem.pool.get("u", object)
        assert mem.pool.listening
        time.sleep(0.05)
        started = time.perf_counter()
        mem.close()
        took.append(time.perf_counter() - started)
    # The poll is 0.5 s: waiting it out took 0.45 s here.
    assert sorted(took)[1] < 0.25, took

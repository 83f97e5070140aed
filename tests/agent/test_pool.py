"""AgentPool: local caching, and invalidation across processes through LISTEN/NOTIFY."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from memstrata.agent.pool import AgentPool, listener_conninfo
from memstrata.logs import event_fields
from tests.agent.recorder import Recorder
from tests.sandbox.support import free_port
from tests.tcp_proxy import TcpProxy
from tests.waiting import wait_for

CHILD = Path(__file__).with_name("pool_child.py")


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


# -- local cache ----------------------------------------------------------------------------


def test_get_builds_once_and_invalidate_rebuilds() -> None:
    recorder = Recorder()
    pool: AgentPool[list[int]] = AgentPool(on_invalidate=recorder)
    builds: list[int] = []

    def factory() -> list[int]:
        builds.append(1)
        return [len(builds)]

    first = pool.get("u", factory)
    assert pool.get("u", factory) is first
    assert builds == [1] and "u" in pool and len(pool) == 1
    pool.invalidate("u")
    assert "u" not in pool and pool.peek("u") is None
    assert pool.get("u", factory) == [2]
    assert recorder.users == ["u"]
    assert pool.start() is False  # no engine: local only


def test_a_value_built_during_an_invalidation_is_not_cached() -> None:
    pool: AgentPool[str] = AgentPool()

    def slow_factory() -> str:
        pool.invalidate("u")  # e.g. a frontend edit lands while the agent is being built
        return "stale"

    assert pool.get("u", slow_factory) == "stale"
    assert "u" not in pool
    assert pool.get("u", lambda: "fresh") == "fresh"
    assert pool.peek("u") == "fresh"


def test_a_failing_hook_does_not_break_invalidation(caplog: pytest.LogCaptureFixture) -> None:
    def hook(user_id: str) -> None:
        raise RuntimeError("hook bug")

    pool: AgentPool[str] = AgentPool(on_invalidate=hook)
    pool.get("u", lambda: "a")
    pool.invalidate("u")
    assert "u" not in pool
    assert [event_fields(r).get("error") for r in caplog.records] == ["RuntimeError: hook bug"]


def test_notify_failure_still_invalidates_locally(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead = create_engine(
        f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/x",
        connect_args={"connect_timeout": 2},
    )
    pool: AgentPool[str] = AgentPool(dead, start_timeout_s=0.1)
    try:
        pool.get("u", lambda: "a")  # the listener cannot connect; the cache still works
        assert pool.listening is False and "u" in pool
        pool.invalidate("u")
        assert "u" not in pool
    finally:
        pool.close()
    events = [event_fields(r) for r in caplog.records]
    failed = [f for f in events if f["event"] == "pool.notify_failed"]
    assert [f["user_id"] for f in failed] == ["u"]
    assert failed[0]["error"].startswith("OperationalError")
    assert "pool.listener_disconnected" in {f["event"] for f in events}


def test_conninfo_drops_the_sqlalchemy_driver_name(engine: Engine) -> None:
    assert listener_conninfo(engine).startswith("postgresql://")
    assert "+psycopg" not in listener_conninfo(engine)


# -- across processes ---------------------------------------------------------------------------


def test_invalidation_reaches_another_process(pg_url: str, engine: Engine) -> None:
    recorder = Recorder()
    parent: AgentPool[str] = AgentPool(engine, on_invalidate=recorder)
    assert parent.start() is True
    child = subprocess.Popen(
        [sys.executable, str(CHILD), pg_url, "u1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        parent.get("u1", lambda: "parent agent")

        parent.invalidate("u1")

        assert child.stdout.readline().strip() == "invalidated u1"
        assert child.stdout.readline().strip() == "dropped"
        assert child.wait(timeout=30) == 0
        # ...and the child's own invalidation reached the parent.
        wait_for(lambda: recorder.seen("from-child"), 10, "the child's invalidation")
        assert recorder.users.count("u1") == 1  # our own NOTIFY is not applied twice
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        parent.close()


def test_listener_reconnects_and_clears_what_it_may_have_missed(engine: Engine) -> None:
    recorder = Recorder()
    listener: AgentPool[str] = AgentPool(engine, on_invalidate=recorder, reconnect_initial_s=0.05)
    sender: AgentPool[str] = AgentPool(engine)
    try:
        assert listener.start() is True
        listener.get("u", lambda: "a")
        with engine.connect() as conn:
            killed = (
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = :name"
                    ),
                    {"name": f"memstrata-pool-{listener.origin}"},
                )
                .scalars()
                .all()
            )
        assert killed == [True]

        wait_for(lambda: listener.connects == 2, 10, "the listener's reconnection")
        assert "u" not in listener  # dropped on reconnect: invalidations may have been missed
        listener.get("v", lambda: "b")
        sender.invalidate("v")
        wait_for(lambda: recorder.seen("v"), 10, "the invalidation of v")
        assert "v" not in listener
    finally:
        listener.close()
        sender.close()
    assert listener.listening is False


def test_malformed_notifications_are_ignored(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    pool: AgentPool[str] = AgentPool(engine, on_invalidate=recorder)
    try:
        assert pool.start() is True
        pool.get("u", lambda: "a")
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_notify('memstrata_agent_pool', 'not json')"))
            conn.execute(
                text("SELECT pg_notify('memstrata_agent_pool', :p)"),
                {"p": '{"user_id": "marker", "origin": "elsewhere"}'},
            )
            conn.commit()
        wait_for(lambda: recorder.seen("marker"), 10, "the well-formed notification")
        assert "u" in pool
        bad = [event_fields(r) for r in caplog.records]
        assert [b["payload"] for b in bad if b.get("event") == "pool.bad_notification"] == [
            "not json"
        ]
    finally:
        pool.close()


def test_a_silently_dropped_listener_notices_and_reconnects(pg_url: str, engine: Engine) -> None:
    """A proxy stops forwarding the LISTEN connection without closing it: invalidations
    sent meanwhile are lost, and only the missing heartbeat tells the pool so."""
    url = make_url(pg_url)
    [upstream] = [p for p in Path(str(url.query["host"])).glob(".s.PGSQL.*") if p.suffix != ".lock"]
    with TcpProxy(str(upstream)) as proxy:
        # NullPool: each heartbeat opens its own connection, so only the LISTEN one freezes
        proxied = create_engine(
            url.difference_update_query(["host"]).set(host="127.0.0.1", port=proxy.port),
            poolclass=NullPool,
        )
        recorder = Recorder()
        listener: AgentPool[str] = AgentPool(
            proxied,
            on_invalidate=recorder,
            reconnect_initial_s=0.05,
            poll_s=0.1,
            heartbeat_s=0.3,
            heartbeat_timeout_s=0.6,
        )
        sender: AgentPool[str] = AgentPool(engine)
        try:
            assert listener.start() is True
            wait_for(lambda: proxy.freeze() >= 1, 5, "the LISTEN connection to freeze")
            listener.get("u", lambda: "stale agent")
            sender.invalidate("u")  # lost: the frozen connection swallows it
            time.sleep(0.2)
            assert not recorder.seen("u")

            wait_for(lambda: listener.connects == 2, 10, "the listener's reconnection")
            assert "u" not in listener  # cleared on reconnect
            listener.get("v", lambda: "b")
            sender.invalidate("v")
            wait_for(lambda: recorder.seen("v"), 10, "the invalidation of v")
            time.sleep(1.0)  # heartbeats keep arriving on the new connection
            assert listener.connects == 2
        finally:
            listener.close()
            sender.close()
            proxied.dispose()

"""Per-user locks across the event loops and threads of one process.

A host may drive one runtime from several threads, each running its own loop
(``asyncio.run`` per request or job). Every cross-thread test runs its threads as daemons
and joins them with a timeout, so a lock that never wakes its waiter fails the test
instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import pytest

from memstrata.memory.store import MemoryFile
from memstrata.runtime import Memstrata
from memstrata.sandbox.tasks import LoopSafeLock, UserLocks, WritesInFlight
from tests.waiting import wait_for

USER = "user-1"
JOIN_S = 20.0  # far above what the work takes: reaching it means a waiter was never woken

Loop = Callable[[], Coroutine[Any, Any, None]]


def run_loops(*mains: Loop, timeout_s: float = JOIN_S) -> None:
    """Run each ``main`` with ``asyncio.run`` in a thread of its own, all started together;
    fail if one is still running after ``timeout_s`` and re-raise what one raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(mains))

    def thread(main: Loop) -> None:
        start.wait()
        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(m,), daemon=True) for m in mains]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    assert hung == 0, f"{hung} of {len(threads)} threads still waiting after {timeout_s} s"
    if errors:
        raise errors[0]


# Blocks this thread (and its loop, if it runs on one) until a condition holds.
until = partial(wait_for, timeout_s=JOIN_S, every_s=0.001)


def queued(locks: UserLocks, user_id: str, waiters: int) -> Callable[[], bool]:
    """Whether ``waiters`` tasks are queued for ``user_id``'s lock."""

    def check() -> bool:
        entry = locks._locks.get(user_id)
        return entry is not None and len(entry.lock._waiters) == waiters

    return check


# -- the lock alone ----------------------------------------------------------------------------


def test_tasks_of_two_loops_take_turns_on_one_user() -> None:
    locks = UserLocks()
    inside = 0
    most_inside = 0
    done = 0
    count = threading.Lock()

    async def critical_section() -> None:
        nonlocal inside, most_inside, done
        async with locks.hold(USER):
            with count:
                inside += 1
                most_inside = max(most_inside, inside)
            time.sleep(0.0005)  # lets the other thread run while this one holds the lock
            await asyncio.sleep(0)  # and this loop's other tasks
            with count:
                inside -= 1
                done += 1

    async def worker() -> None:
        for _ in range(15):
            await critical_section()

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(3)))

    run_loops(main, main)
    assert (done, most_inside) == (2 * 3 * 15, 1)
    assert locks._locks == {}  # dropped with its last holder


def test_the_holder_passes_through_and_is_alone() -> None:
    """Re-entrant for the task holding it; another task, of this loop or another thread's,
    neither holds it nor gets in before it is released."""
    locks = UserLocks()
    order: list[str] = []
    other_thread_saw: list[bool] = []

    async def other_task() -> None:
        assert not locks.held_here(USER)
        async with locks.hold(USER):
            order.append("other task")

    def other_thread() -> None:
        async def look() -> None:
            other_thread_saw.append(locks.held_here(USER))

        asyncio.run(look())

    async def main() -> None:
        async with locks.hold(USER):
            assert locks.held_here(USER)
            async with locks.hold(USER):  # nested: passes through at once
                assert locks.held_here(USER)
                other = asyncio.create_task(other_task())
                await asyncio.sleep(0.01)
                t = threading.Thread(target=other_thread)
                t.start()
                t.join(JOIN_S)
                order.append("holder")
            assert locks.held_here(USER)
        assert not locks.held_here(USER)
        await asyncio.wait_for(other, JOIN_S)

    asyncio.run(main())
    assert order == ["holder", "other task"]
    assert other_thread_saw == [False]
    assert locks._locks == {}


def test_a_waiter_of_another_loop_cancelled_at_handover_passes_the_lock_on() -> None:
    """The holder releases while the waiter's loop is busy; the waiter is cancelled before
    its loop wakes it: the lock it was handed goes to the next waiter, nothing leaks."""
    locks = UserLocks()
    held = threading.Event()
    busy = threading.Event()
    released = threading.Event()
    cancelled: list[bool] = []
    third_got_it = threading.Event()

    async def holder() -> None:
        async with locks.hold(USER):
            held.set()
            until(queued(locks, USER, 2), what="the waiter and the third queued")
            until(busy.is_set, what="the waiter's loop busy")
        released.set()

    async def waiter() -> None:
        until(held.is_set, what="the holder in the lock")
        task = asyncio.create_task(_hold_once(locks))
        await asyncio.sleep(0)  # queued first, then the third
        busy.set()
        until(released.is_set, what="the release")  # blocks this loop: no wake-up yet
        assert queued(locks, USER, 1)(), "handed to this task, which is not yet awake"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            cancelled.append(True)

    async def third() -> None:
        until(queued(locks, USER, 1), what="the waiter queued first")
        await _hold_once(locks)
        third_got_it.set()

    run_loops(holder, waiter, third)
    assert cancelled == [True]
    assert third_got_it.is_set()
    assert locks._locks == {}


def test_a_waiter_cancelled_at_handover_in_the_same_loop_passes_the_lock_on() -> None:
    locks = UserLocks()

    async def main() -> None:
        waiting = asyncio.create_task(_hold_once(locks))
        async with locks.hold(USER):
            await asyncio.sleep(0.01)
            assert locks._locks[USER].users == 2
        waiting.cancel()  # in the same step as the release: handed over, not woken yet
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(_hold_once(locks), 1.0)

    asyncio.run(main())
    assert locks._locks == {}


def test_a_holder_cancelled_inside_releases_to_another_loop() -> None:
    locks = UserLocks()
    entered = threading.Event()
    got_it = threading.Event()

    async def holder() -> None:
        inside = asyncio.Event()

        async def hold_forever() -> None:
            async with locks.hold(USER):
                inside.set()
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(hold_forever())
        await inside.wait()
        until(queued(locks, USER, 1), what="the other loop's task queued")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def waiter() -> None:
        until(entered.is_set, what="the holder in the lock")
        await _hold_once(locks)
        got_it.set()

    run_loops(holder, waiter)
    assert got_it.is_set()
    assert locks._locks == {}


def test_a_waiter_whose_loop_closed_is_skipped() -> None:
    """A loop closed with a task still waiting never runs it again: the release passes
    over it instead of handing it a lock it could never give back."""
    lock = LoopSafeLock()
    closed = asyncio.new_event_loop()

    async def take() -> None:
        await lock.acquire()

    asyncio.run(take())
    stranded = closed.create_task(take())
    closed.run_until_complete(asyncio.sleep(0.01))  # the task now waits for the lock
    closed.close()
    got_it: list[bool] = []

    async def next_one() -> None:
        lock.release()  # on behalf of the first holder
        await asyncio.wait_for(lock.acquire(), 1.0)
        got_it.append(lock.locked())
        lock.release()

    asyncio.run(next_one())
    assert got_it == [True] and not lock.locked()
    stranded._log_destroy_pending = False  # no "Task was destroyed but it is pending!"


def test_settle_waits_only_for_the_writes_of_its_own_loop() -> None:
    """A server settling on its loop is not hindered by a write under way on another
    thread's loop, which asyncio could not await."""
    writes = WritesInFlight(UserLocks())
    started = threading.Event()
    finish = threading.Event()
    still_running: list[int] = []

    async def write() -> MemoryFile:
        started.set()
        await asyncio.to_thread(finish.wait, JOIN_S)
        raise RuntimeError("not stored")  # enough for the bookkeeping under test

    async def writer() -> None:
        with pytest.raises(RuntimeError, match="not stored"):
            await writes.run(USER, write())

    async def server() -> None:
        until(started.is_set, what="the write started")
        try:
            still_running.append(await writes.settle(0.05))
        finally:
            finish.set()

    run_loops(writer, server)
    assert still_running == [0]


async def _hold_once(locks: UserLocks) -> None:
    async with locks.hold(USER):
        pass


# -- through the runtime -----------------------------------------------------------------------


def test_frontend_edits_of_one_user_from_two_threads(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """The reviewer's case: one runtime, two threads each with its own loop, editing the
    same user's file. Every edit returns and is stored as a version of its own."""
    mem = open_runtime()
    mem.store.provision_default_files(USER)
    initial = mem.store.get_memory_file(USER, "user")
    assert initial is not None

    def editor(i: int) -> Loop:
        async def main() -> None:
            for j in range(10):
                await mem.sync.frontend_edit(USER, "user", f"# USER\n- thread {i} edit {j}")

        return main

    run_loops(editor(0), editor(1), timeout_s=60.0)
    final = mem.store.get_memory_file(USER, "user")
    assert final is not None and final.version == initial.version + 20
    assert mem.sync._locks._locks == {}


def test_agent_tool_calls_of_one_user_from_two_threads(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()
    mem.store.provision_default_files(USER)

    def agent(i: int) -> Loop:
        async def main() -> None:
            session = await mem.open_agent_session(USER, token_limit=8000)
            for j in range(5):
                await session.tools.call("record_memory", {"content": f"fact {i}.{j}"})
            await session.end_round()

        return main

    run_loops(agent(0), agent(1), timeout_s=60.0)
    memory = mem.store.get_memory_file(USER, "memory")
    assert memory is not None
    missing = [f"fact {i}.{j}" for i in range(2) for j in range(5)]
    missing = [fact for fact in missing if fact not in memory.content]
    assert missing == []

"""If-Match write claims and open sessions across the event loops and threads of one process.

A host may drive one runtime from several threads, each running its own loop
(``asyncio.run`` per request or job). A reader waiting for a write in flight may sit on
another loop than the writer, and several readers on several loops. Threads run as daemons
joined with a timeout (``run_loops``), so a waiter that is never woken fails the test
instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from memstrata.errors import VersionConflictError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.runtime import Memstrata
from memstrata.sandbox.claims import Claim, WriteClaims
from memstrata.sandbox.results import Outcome, SyncResult
from memstrata.sandbox.sync import SyncService
from tests.sandbox.test_user_locks import JOIN_S, Loop, run_loops, until

pytestmark = pytest.mark.timeout(120)

USER = "user-1"
KIND = FileKind.USER
PROMPT_S = 1.0  # a woken reader answers within this; an unwoken one sits out WRITE_WAIT_S (5 s)
WAITING_S = 0.2  # time for readers that announced a read to reach the wait


@pytest.fixture
def mem(open_runtime: Callable[..., Memstrata]) -> Memstrata:
    runtime = open_runtime()
    runtime.store.provision_default_files(USER)
    return runtime


class YieldingId(str):
    """An id whose every hash lets the other threads run: each dict step taken with it is
    a point where a step of another thread can cut in. Steps that are not atomic across
    threads are then cut in the middle within a few hundred tries, not once in a million."""

    def __hash__(self) -> int:
        time.sleep(0)  # gives up the GIL
        return str.__hash__(self)


class Gate:
    """Holds the service's upserts until opened: an If-Match write stays in flight, its
    claim taken, for as long as a test needs."""

    def __init__(self, mem: Memstrata) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.opened_at = 0.0
        upsert = mem.sync.db.upsert

        async def held(
            user_id: str, kind: FileKind, content: str, expected: int | None
        ) -> MemoryFile:
            self.entered.set()
            await asyncio.to_thread(self.opened.wait, JOIN_S)
            return await upsert(user_id, kind, content, expected)

        mem.sync.db.upsert = held  # type: ignore[method-assign,assignment]

    def open(self) -> None:
        self.opened_at = time.monotonic()
        self.opened.set()


def _stored(mem: Memstrata) -> MemoryFile:
    file = mem.store.get_memory_file(USER, KIND)
    assert file is not None
    return file


def _readers_wait_for_one_write(mem: Memstrata, readers: int) -> None:
    """One thread writes on the stored version, held in flight; ``readers`` threads, each
    with a loop of its own, read the file meanwhile. Each reader gets what the write
    stored, promptly after it lands."""
    base = _stored(mem)
    text = "# USER\n- written on one loop, read on others"
    gate = Gate(mem)
    reading: list[int] = []  # readers that started their read
    answers: list[tuple[MemoryFile, float]] = []

    async def writer() -> None:
        await mem.sync.frontend_edit(USER, "user", text, expected_version=base.version)

    async def reader() -> None:
        until(gate.entered.is_set, what="the write claimed and in flight")
        reading.append(1)
        file, _ = await mem.sync.read_file(USER, KIND)
        answers.append((file, time.monotonic()))

    async def opener() -> None:
        until(lambda: len(reading) == readers, what="every reader reading")
        time.sleep(WAITING_S)  # the readers now wait for the write
        gate.open()

    run_loops(writer, opener, *([reader] * readers))
    assert len(answers) == readers
    for file, answered_at in answers:
        assert (file.version, file.content) == (base.version + 1, text)
        assert answered_at - gate.opened_at < PROMPT_S, "the reader sat out its timeout"
    assert mem.sync._claims._claims == {}


def test_a_reader_on_another_loop_is_woken_when_the_write_lands(mem: Memstrata) -> None:
    """An event bound to one loop and set from another thread never wakes the reader's
    loop: it answered only at its timeout, 5 s later."""
    _readers_wait_for_one_write(mem, readers=1)


def test_readers_on_two_loops_wait_for_one_write(mem: Memstrata) -> None:
    """An asyncio event binds to the first loop that waits on it: the second reader got a
    ``RuntimeError`` (a 500, or a tool error)."""
    _readers_wait_for_one_write(mem, readers=2)


def test_if_match_writers_on_several_loops(mem: Memstrata) -> None:
    """Read, edit, write with If-Match, again on a conflict: from four threads, each with
    a loop of its own. Every write is stored or a version conflict; every write stored
    is a version of its own; no claim is left behind."""
    upsert = mem.sync.db.upsert

    async def slow_upsert(
        user_id: str, kind: FileKind, content: str, expected: int | None
    ) -> MemoryFile:
        await asyncio.sleep(0.01)  # in flight long enough for other loops to read it
        return await upsert(user_id, kind, content, expected)

    mem.sync.db.upsert = slow_upsert  # type: ignore[method-assign,assignment]
    base = _stored(mem)
    stored: list[int] = []
    conflicts: list[int] = []
    unexpected: list[BaseException] = []

    def editor(i: int) -> Loop:
        async def main() -> None:
            for j in range(30):
                read, _ = await mem.sync.read_file(USER, KIND)
                text = f"{read.content}\n- thread {i} edit {j}"
                try:
                    file = await mem.sync.frontend_edit(USER, "user", text, read.version)
                except VersionConflictError:
                    conflicts.append(i)
                except BaseException as exc:  # a KeyError, a loop-bound event's RuntimeError
                    unexpected.append(exc)
                    raise
                else:
                    stored.append(file.version)

        return main

    run_loops(*(editor(i) for i in range(4)), timeout_s=60.0)
    assert unexpected == []
    assert sorted(stored) == list(range(base.version + 1, base.version + 1 + len(stored)))
    assert _stored(mem).version == base.version + len(stored)
    assert len(stored) + len(conflicts) == 4 * 30
    assert mem.sync._claims._claims == {}


# -- the claims alone, over a store in memory ---------------------------------------------------


class MemoryDB:
    """The two calls ``WriteClaims`` makes of the store, with the store's version check:
    fast, so threads can race through thousands of claims."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.version = 1

    async def get(self, user_id: str, kind: FileKind) -> MemoryFile | None:
        with self._mutex:
            return MemoryFile(user_id, kind, "", self.version, None)

    async def upsert(
        self, user_id: str, kind: FileKind, content: str, expected: int | None
    ) -> MemoryFile:
        await asyncio.sleep(0)  # the writes of this loop interleave too
        with self._mutex:
            if expected is not None and expected != self.version:
                raise VersionConflictError(user_id, kind.file_type, expected, self.version)
            self.version += 1
            return MemoryFile(user_id, kind, content, self.version, datetime.now(UTC))


def test_claims_raced_from_several_threads() -> None:
    """Two writers on two threads found the file unclaimed and claimed it both: the first
    to land dropped the other's claim, whose release then failed with ``KeyError`` after
    its commit (no mirror, no invalidation)."""
    store = MemoryDB()
    claims = WriteClaims(store)  # type: ignore[arg-type]
    user = YieldingId(USER)
    stored: list[int] = []
    unexpected: list[BaseException] = []

    async def write(expected: int) -> None:
        try:
            _, mine = await claims.begin(user, KIND, expected)
            file = await claims.write(user, KIND, "x", expected, mine)
        except VersionConflictError:
            return
        except BaseException as exc:
            unexpected.append(exc)
            raise
        stored.append(file.version)

    async def writer() -> None:
        for _ in range(100):
            expected = store.version  # the same base for both, often for other threads too
            await asyncio.gather(write(expected), write(expected))

    run_loops(*([writer] * 4), timeout_s=60.0)
    assert unexpected == []
    assert sorted(stored) == list(range(2, store.version + 1))
    assert claims._claims == {}


def test_a_reader_whose_loop_closed_does_not_keep_the_claim() -> None:
    """A reader's loop closed while it waited: landing must pass over it. Waking it raised
    ``Event loop is closed`` before the claim was dropped, so every later read waited for
    a write that had long landed and answered with its old file."""
    store = MemoryDB()
    claims = WriteClaims(store)  # type: ignore[arg-type]
    closed = asyncio.new_event_loop()

    async def begin() -> tuple[MemoryFile | None, Claim | None]:
        return await claims.begin(USER, KIND, store.version)

    _, mine = asyncio.run(begin())
    stranded = closed.create_task(claims.read(USER, KIND))
    closed.run_until_complete(asyncio.sleep(0.01))  # the read now waits for the write
    closed.close()

    async def land() -> MemoryFile:
        return await claims.write(USER, KIND, "landed", store.version, mine)

    file = asyncio.run(land())
    assert file.version == 2
    assert claims._claims == {}
    stranded._log_destroy_pending = False  # no "Task was destroyed but it is pending!"


# -- open sessions -------------------------------------------------------------------------------


def test_open_sessions_counted_from_several_threads(mem: Memstrata) -> None:
    """Sessions of one user started and ended from four threads, each with its own loop:
    each thread ends all but one of its starts. A count updated in two steps lost starts or
    ends (``KeyError`` on the second delete), and a user's map dropped by one thread while
    another counted in it lost sessions."""
    sync = mem.sync
    _only_the_bookkeeping(sync)
    user = YieldingId(USER)
    unexpected: list[BaseException] = []

    def host(i: int) -> Loop:
        async def main() -> None:
            session = YieldingId(f"session-{i % 2}")  # two threads share each session id
            try:
                for _ in range(100):
                    await sync.start_session(user, session)
                    sync.open_sessions(user)
                    sync.end_session(user, session)
                await sync.start_session(user, session)
            except BaseException as exc:
                unexpected.append(exc)
                raise

        return main

    run_loops(*(host(i) for i in range(4)), timeout_s=60.0)
    assert unexpected == []
    assert sync._sessions._open == {USER: Counter({"session-0": 2, "session-1": 2})}
    assert sync.open_sessions(USER) == ["session-0", "session-1"]
    sync.end_session(USER, "session-0")
    sync.end_session(USER, "session-0")
    assert sync.open_sessions(USER) == ["session-1"]


def _only_the_bookkeeping(sync: SyncService) -> None:
    """Starting a session without the DB and sandbox work (tested elsewhere), so the
    threads race through the session bookkeeping thousands of times."""

    async def provision(user_id: str) -> list[FileKind]:
        return []

    async def reconcile(*args: object) -> SyncResult:
        return SyncResult("USER.md", "none", Outcome.UNCHANGED)

    sync.db.provision = provision  # type: ignore[method-assign]
    sync._files.reconcile = reconcile  # type: ignore[method-assign,assignment]
    sync._files.push_agents = reconcile  # type: ignore[method-assign,assignment]

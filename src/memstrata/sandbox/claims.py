"""The frontend's reads and If-Match writes of the DB copy, as seen from this process.

Per (user, file) it keeps the If-Match write under way here and the version last read or
written here, with a digest of its text (to tell a retry from a stale write). With them
:meth:`~memstrata.sandbox.sync.SyncService.frontend_edit` refuses some stale writes
without a query, and :meth:`~memstrata.sandbox.sync.SyncService.read_file`
answers with the version a write in flight is about to store. Within one process only:
across processes the store's optimistic lock decides.

The claims hold across the event loops and threads of the process (a host may run one
loop per thread, see :mod:`memstrata.sandbox.tasks`): a ``threading.Lock`` guards them, and
a write that lands wakes the readers waiting for it on whichever loop they run. asyncio's
and anyio's events cannot serve there: one binds to the first loop that waits on it (a
reader on another loop gets a ``RuntimeError``), and its ``set()`` from another thread does
not wake the waiter's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import anyio

from memstrata.errors import VersionConflictError
from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import FileKind
from memstrata.memory.same_text import stale_write, unchanged_write
from memstrata.memory.store import MemoryFile
from memstrata.sandbox.tasks import wake

# How long a read waits for a write of the same file in flight in this process.
WRITE_WAIT_S = 5.0
# Files whose last version seen here is remembered (for answering stale writes at once).
SEEN_VERSIONS = 4096


class LoopSafeEvent:
    """A one-shot event that tasks of any event loop and thread can wait for.

    Each waiter waits on a future of its own loop; :meth:`set` completes them with
    ``call_soon_threadsafe``, which wakes each loop in whichever thread it sleeps. A
    ``threading.Lock`` guards the flag and the waiters, held for a few statements and never
    across an await.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._set = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def set(self) -> None:
        """Wake every waiter; never raises (it runs in ``finally`` blocks)."""
        with self._mutex:
            self._set = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A closed loop refuses the call: that waiter never runs again anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake, future)

    async def wait(self, timeout_s: float) -> bool:
        """Wait until set, at most ``timeout_s``; whether it was set."""
        loop = asyncio.get_running_loop()
        with self._mutex:
            if self._set:
                return True
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, future))
        try:
            with anyio.move_on_after(timeout_s):
                await future
        finally:
            self._withdraw(loop, future)
        return self._set

    def _withdraw(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
        # A waiter that timed out or was cancelled leaves the list (a set() emptied it
        # already): waiters that gave up do not pile up on a write that never lands.
        with self._mutex:
            if (loop, future) in self._waiters:
                self._waiters.remove((loop, future))


@dataclass(frozen=True)
class _Seen:
    """The version last read or written here, and its text's digest (:func:`_digest`)."""

    version: int
    digest: int


def _digest(content: str) -> int:
    """A short stand-in for a text, to tell a retry of the write seen here (the same text)
    from a stale write without keeping every file's text. Two texts of one digest only
    send the write on to the database, which compares the texts themselves."""
    return hash(content)


@dataclass(eq=False)
class Claim:
    """An If-Match write in flight in this process: the version it is based on. Told apart
    by identity: two writes on the same base are two claims."""

    base: int
    landed: LoopSafeEvent = field(default_factory=LoopSafeEvent)
    file: MemoryFile | None = None  # what it stored, once it has


class WriteClaims:
    """The frontend's way to the DB copy: every read and write goes past the claims."""

    def __init__(self, db: AsyncStore) -> None:
        self.db = db
        # Guards the two maps below for the tasks of every loop and thread; held for a
        # few statements and never across an await.
        self._mutex = threading.Lock()
        # (user, file) -> the If-Match write in flight here, and the version it is based on.
        self._claims: dict[tuple[str, FileKind], Claim] = {}
        # (user, file) -> the version this process last read or wrote, newest last.
        self._seen: OrderedDict[tuple[str, FileKind], _Seen] = OrderedDict()

    async def read(self, user_id: str, kind: FileKind) -> MemoryFile | None:
        """The DB copy; if an If-Match write of it is under way here, what that stores
        (waited for at most ``WRITE_WAIT_S``)."""
        with self._mutex:
            held = self._claims.get((user_id, kind))
        if held is not None:
            await held.landed.wait(WRITE_WAIT_S)
            if held.file is not None:
                return held.file  # the current copy when it landed
        file = await self.db.get(user_id, kind)
        if file is not None:
            self._saw(user_id, kind, file)
        return file

    async def begin(
        self, user_id: str, kind: FileKind, expected: int | None, content: str | None = None
    ) -> tuple[MemoryFile | None, Claim | None]:
        """Claim a write of ``content`` on ``expected`` and check it against the DB copy;
        returns that copy and the claim for :meth:`write`. ``VersionConflictError`` and DB
        errors propagate, with nothing left claimed. A copy that holds ``content`` already
        is no conflict where the store's rule says so
        (:func:`~memstrata.memory.same_text.unchanged_write`): the write changes nothing, and
        :meth:`write` answers with that copy."""
        mine, ahead = self._claim(user_id, kind, expected, content)
        if ahead is not None and expected is not None:
            # A write on the same base claimed it first here, and lands first: this one's
            # conflict carries the version that one stored. Answered before it landed, it
            # said the base was still current, and a client retried on it and lost again.
            await ahead.landed.wait(WRITE_WAIT_S)
            if ahead.file is not None and not self._unchanged(ahead.file, content, expected):
                raise stale_write(user_id, kind, expected, ahead.file, content)
            # It failed, or is still under way: the database decides, as across processes.
        try:
            previous = await self.db.get(user_id, kind)
            found = 0 if previous is None else previous.version
            if previous is not None:
                self._saw(user_id, kind, previous)
            if (
                expected is not None
                and found != expected
                and not self._unchanged(previous, content, expected)
            ):
                raise stale_write(user_id, kind, expected, previous, content)
        except BaseException:
            self._release(user_id, kind, mine)
            raise
        return previous, mine

    def _unchanged(self, stored: MemoryFile | None, content: str | None, expected: int) -> bool:
        """Whether the store answers this write with ``stored``, nothing written."""
        if content is None:
            return False
        rule = self.db.store.same_text_stale_version
        return unchanged_write(stored, content, expected, rule)

    async def write(
        self, user_id: str, kind: FileKind, content: str, expected: int | None, mine: Claim | None
    ) -> MemoryFile:
        """The write path; then the claim from :meth:`begin` is released, handing readers
        waiting for it what was stored. Content the DB copy holds already is not written
        again (``changed`` False): no new version, no embedding."""
        try:
            file = await self.db.upsert(user_id, kind, content, expected)
            self._saw(user_id, kind, file)
            if mine is not None:
                mine.file = file
        finally:
            self._release(user_id, kind, mine)
        return file

    def _claim(
        self, user_id: str, kind: FileKind, expected: int | None, content: str | None
    ) -> tuple[Claim | None, Claim | None]:
        """Claim the If-Match write on ``expected``: (this write's claim, None). When a
        write based on the same version is already under way here, it commits first (first
        come wins), and it is returned instead, (None, that claim): repeating its embedding
        could not make this one succeed, only waiting tells the version that won."""
        if expected is None:
            return None, None
        key = (user_id, kind)
        # One step under the mutex, from the check to the insert: two writers of different
        # threads must not both find the file unclaimed and overwrite each other's claim.
        with self._mutex:
            seen = self._seen.get(key)
            if seen is not None and expected < seen.version:
                if content is not None and seen.digest == _digest(content):
                    # The text seen here: likely a retry of a write that landed, which the
                    # database's copy decides (``begin``), with no claim on a stale base.
                    return None, None
                # Versions only grow: one older than a version already read or written
                # here is stale without asking the database.
                raise VersionConflictError(user_id, kind.file_type, expected, seen.version)
            held = self._claims.get(key)
            if held is not None:
                # On the same base: that write, to wait for. On a different base one of
                # the two is stale, and the store decides.
                return None, held if held.base == expected else None
            claim = self._claims[key] = Claim(expected)
            return claim, None

    def _release(self, user_id: str, kind: FileKind, mine: Claim | None) -> None:
        """Drop this write's claim and wake its readers. Never raises: it runs after the
        commit, and the mirror and the cache invalidation must still follow."""
        if mine is None:
            return
        key = (user_id, kind)
        with self._mutex:
            # Only this write's own claim: another write's must stay until it lands.
            if self._claims.get(key) is mine:
                del self._claims[key]
        # Once dropped: a reader arriving now reads the DB, which has what was committed.
        mine.landed.set()

    def _saw(self, user_id: str, kind: FileKind, file: MemoryFile) -> None:
        """Remember the version last read or written here (the latest observation, not the
        highest: a lower one read from the database wins, so a stale entry heals on the
        next read)."""
        key = (user_id, kind)
        with self._mutex:
            self._seen[key] = _Seen(file.version, _digest(file.content))
            self._seen.move_to_end(key)
            while len(self._seen) > SEEN_VERSIONS:
                self._seen.popitem(last=False)

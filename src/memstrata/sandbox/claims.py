"""The frontend's reads and If-Match writes of the DB copy, as seen from this process.

Per (user, file) it keeps the If-Match write under way here and the version last read or
written here. With them :meth:`~memstrata.sandbox.sync.SyncService.frontend_edit` refuses
some stale writes without a query, and :meth:`~memstrata.sandbox.sync.SyncService.read_file`
answers with the version a write in flight is about to store. Within one process only:
across processes the store's optimistic lock decides.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import anyio

from memstrata.errors import VersionConflictError
from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile

# How long a read waits for a write of the same file in flight in this process.
WRITE_WAIT_S = 5.0
# Files whose last version seen here is remembered (for answering stale writes at once).
SEEN_VERSIONS = 4096


@dataclass
class Claim:
    """An If-Match write in flight in this process: the version it is based on."""

    base: int
    landed: anyio.Event = field(default_factory=anyio.Event)
    file: MemoryFile | None = None  # what it stored, once it has


class WriteClaims:
    """The frontend's way to the DB copy: every read and write goes past the claims."""

    def __init__(self, db: AsyncStore) -> None:
        self.db = db
        # (user, file) -> the If-Match write in flight here, and the version it is based on.
        self._claims: dict[tuple[str, FileKind], Claim] = {}
        # (user, file) -> the version this process last read or wrote, newest last.
        self._seen: OrderedDict[tuple[str, FileKind], int] = OrderedDict()

    async def read(self, user_id: str, kind: FileKind) -> MemoryFile | None:
        """The DB copy; if an If-Match write of it is under way here, what that stores
        (waited for at most ``WRITE_WAIT_S``)."""
        held = self._claims.get((user_id, kind))
        if held is not None:
            with anyio.move_on_after(WRITE_WAIT_S):
                await held.landed.wait()
            if held.file is not None:
                return held.file  # the current copy when it landed
        file = await self.db.get(user_id, kind)
        if file is not None:
            self._saw(user_id, kind, file.version)
        return file

    async def begin(
        self, user_id: str, kind: FileKind, expected: int | None
    ) -> tuple[MemoryFile | None, Claim | None]:
        """Claim a write on ``expected`` and check it against the DB copy; returns that copy
        and the claim for :meth:`write`. ``VersionConflictError`` and DB errors propagate,
        with nothing left claimed."""
        mine = self._claim(user_id, kind, expected)
        try:
            previous = await self.db.get(user_id, kind)
            found = 0 if previous is None else previous.version
            if previous is not None:
                self._saw(user_id, kind, found)
            if expected is not None and found != expected:
                actual = None if previous is None else found
                raise VersionConflictError(user_id, kind.file_type, expected, actual)
        except BaseException:
            self._release(user_id, kind, mine)
            raise
        return previous, mine

    async def write(
        self, user_id: str, kind: FileKind, content: str, expected: int | None, mine: Claim | None
    ) -> MemoryFile:
        """The write path; then the claim from :meth:`begin` is released, handing readers
        waiting for it what was stored."""
        try:
            file = await self.db.upsert(user_id, kind, content, expected)
            self._saw(user_id, kind, file.version)
            if mine is not None:
                mine.file = file
        finally:
            self._release(user_id, kind, mine)
        return file

    def _claim(self, user_id: str, kind: FileKind, expected: int | None) -> Claim | None:
        """Claim the If-Match write on ``expected``. When a write based on the same version
        is already under way here, it commits first (first come wins): neither waiting for
        it nor repeating its embedding could make this one succeed, so this is a conflict
        at once, without a query."""
        if expected is None:
            return None
        seen = self._seen.get((user_id, kind))
        if seen is not None and expected < seen:
            # Versions only grow: one older than a version already read or written here
            # is stale without asking the database.
            raise VersionConflictError(user_id, kind.file_type, expected, seen)
        held = self._claims.get((user_id, kind))
        if held is not None:
            if held.base == expected:
                raise VersionConflictError(
                    user_id, kind.file_type, expected, expected, in_progress=True
                )
            return None  # a different base: one of the two is stale; the store decides
        claim = self._claims[(user_id, kind)] = Claim(expected)
        return claim

    def _release(self, user_id: str, kind: FileKind, mine: Claim | None) -> None:
        if mine is not None:
            mine.landed.set()
            del self._claims[(user_id, kind)]

    def _saw(self, user_id: str, kind: FileKind, version: int) -> None:
        """Remember the version last read or written here (the latest observation, not the
        highest: a lower one read from the database wins, so a stale entry heals on the
        next read)."""
        self._seen[(user_id, kind)] = version
        self._seen.move_to_end((user_id, kind))
        while len(self._seen) > SEEN_VERSIONS:
            self._seen.popitem(last=False)

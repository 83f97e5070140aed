"""What every sync scenario of :class:`~memstrata.sandbox.sync.SyncService` stands on: the
service's state and the steps they share.

Apart from :mod:`memstrata.sandbox.sync` so that module reads as the scenarios alone: here
are the parts each of them holds (the reconciler, the per-user locks, the write claims,
the open sessions and trackers) and the steps they all take — the target a sync works on,
the locks it holds, one file's read-back, the DB versions a round starts from.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.base import Sandbox, SandboxProvider
from memstrata.sandbox.claims import WriteClaims
from memstrata.sandbox.exclusive import exclusive
from memstrata.sandbox.follow_on import CacheInvalidator
from memstrata.sandbox.lookalike import noting_lookalikes
from memstrata.sandbox.notices import OpenTrackers
from memstrata.sandbox.reconcile import DB_ERRORS, Reconciler
from memstrata.sandbox.results import Scenario, SyncResult, Target, open_sandbox
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.sessions import ReadBackMarks, SessionRegistry
from memstrata.sandbox.synced import SyncedVersions, provider_identity
from memstrata.sandbox.tasks import UserLocks, WritesInFlight


class SyncCore:
    """The state and shared steps of :class:`~memstrata.sandbox.sync.SyncService`, which
    documents them."""

    def __init__(
        self,
        store: MemoryStore,
        sandboxes: SandboxProvider,
        *,
        pool: CacheInvalidator | None = None,
        templates: TemplateSet | None = None,
    ) -> None:
        self.store = store
        self.sandboxes = sandboxes
        self.pool = pool
        self.db = AsyncStore(store)
        # What each sandbox file was last synced at: in the database when the provider
        # names its sandboxes, so other processes naming the same ones see it (``synced``).
        synced = SyncedVersions(store.sessions, provider_identity(sandboxes))
        self._files = Reconciler(self.db, templates or store.templates, synced)
        self._locks = UserLocks()
        self._claims = WriteClaims(self.db)
        self._sessions = SessionRegistry()
        self._marks = ReadBackMarks(sandboxes)
        self._writes = WritesInFlight(self._locks)
        self._trackers = OpenTrackers()

    async def _read_back(self, t: Target, kind: FileKind, fallback: SyncBase | None) -> SyncResult:
        """The read-back rule for one file; a restore notes a lookalike root file left in
        place (``memory.md`` beside a missing MEMORY.md, :mod:`.lookalike`)."""
        return await noting_lookalikes(t, await self._files.reconcile(t, kind, fallback))

    async def _snapshot(self, user_id: str) -> dict[str, SyncBase] | None:
        try:
            files = await self.db.files(user_id)
        except DB_ERRORS:
            return None
        return {
            f.kind.filename: SyncBase(f.version, f.content)
            for f in files
            if f.kind in USER_FILE_KINDS
        }

    def _target(
        self,
        user_id: str,
        session_id: str | None,
        scenario: Scenario,
        sandbox: Sandbox | None = None,
    ) -> Target:
        if sandbox is None:
            sandbox = open_sandbox(self.sandboxes, user_id, session_id)
        return Target(user_id, session_id, sandbox, scenario)

    def sandbox_lock(self, sandbox: Sandbox) -> AbstractAsyncContextManager[None]:
        """Hold ``sandbox`` against every other process's sync of it, when the sandbox has
        a lock (``exclusive()``, :mod:`memstrata.sandbox.exclusive`; else nothing is held).
        Re-entrant within a task. Take :meth:`user_lock` first, and hold one sandbox at a
        time: a tool holds both across its sandbox write and its sync (which takes them
        again), so no other process's push lands between the two."""
        return exclusive(sandbox)

    def user_lock(self, user_id: str) -> AbstractAsyncContextManager[None]:
        """Serialise work on one user's files in this service. Re-entrant within a task, so
        an agent tool can hold it across its read, edit, sandbox write and the read-back
        (``after_controlled_write`` takes it again): otherwise two tool calls, or a tool
        call and a frontend edit's mirror, read the same text and one edit is lost."""
        return self._locks.hold(user_id)

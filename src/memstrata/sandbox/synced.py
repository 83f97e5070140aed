"""The DB version memstrata last left each sandbox file at: the server's own record of
what a sandbox copy started from, beside the base records an agent can remove or garble.

A read-back trusts the sandbox's base record (:mod:`memstrata.sandbox.state`) — a file in
the agent's own directory. When it is missing, unreadable or contradicts this record, the
read-back still knows the version it last saw the file agree with (pushed, written back
or found equal): the agent's copy is written only over that version, and kept aside when
the DB holds a newer one (:func:`memstrata.sandbox.rule.decide`'s ``pushed``). Without one
(a sandbox never synced since this record existed) the plain sandbox-first rule stays.

Where it is kept depends on whether the provider names its sandboxes
(:class:`~memstrata.sandbox.base.IdentifiedSandboxProvider`; the local provider's identity
is its host name and its root's real path):

* with an identity, a row of ``sandbox_synced`` in PostgreSQL (:mod:`.synced_repository`),
  one per user, provider identity (:func:`root_key`), sandbox (:func:`sandbox_key`) and
  file, so every process naming the same sandboxes sees it: a person's edit pushed by
  ``memstrata serve`` is known to the agent host's read-back, and to any process after a
  restart. The identity is part of the key because replicas share one database but may
  each have a sandbox root of their own: under (user, sandbox, file) alone, replica B's
  note of version 3 (its own sandbox) made replica A distrust its valid base record of
  version 2, and A's stale copy was written over version 3;
* without one, in this process only (bounded, :data:`MAX_SYNCED_FILES`): another process
  may hold a different sandbox under the same ids.

The safety property: the version recorded never exceeds the one the sandbox copy started
from — a lagging version costs a copy kept aside that could have been written, never a DB
version written over. It holds across processes because every note is taken inside the
reconcile or provision that left the file at that version, under the sandbox's
cross-process ``exclusive()`` lock (:mod:`memstrata.sandbox.exclusive`), after the file
write landed: the notes of one sandbox are taken in the order its file writes happen, so
the last note names the copy the file holds, and a note replaces the one before whether
it is higher or lower (only raising it would let a push of an older version, landing after
a newer one, leave the newer number on an older copy). A note that is lost (the process
dies, or the write fails, between the file write and the note) leaves the previous one,
of a copy the file held before: an older version, since a reconcile reads the DB under the
lock and DB versions only grow — lagging, so safe. (A new user's provisioning pushes a
copy read before the lock, into a file with no content; only a lost note there could
leave a newer number, on a blank copy the agent then edits without records: rare enough
to leave.) The note is its own small transaction, not the DB write's: it describes the
sandbox file, which a push writes after that commit (and a write-back's store is the one
memory-file write path, which knows no sandbox); committed after what it describes, it
can only lag. A sandbox without ``exclusive()`` has no such order across processes, as
its base records have none.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict

import anyio.to_thread
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import DatabaseSetupError
from memstrata.logs import log_failure
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.base import IdentifiedSandboxProvider, SandboxProvider
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.results import SyncResult, Target
from memstrata.sandbox.synced_repository import SyncedRepository
from memstrata.sandbox.timed import TimedSandboxProvider

logger = logging.getLogger("memstrata.sandbox.sync")

# Sandbox files remembered at most in a process, for a provider without an identity
# (three per session sandbox, a few hundred bytes each); past it the least recently synced
# are forgotten and their read-backs fall back to the plain sandbox-first rule.
MAX_SYNCED_FILES = 30_000

USER_SANDBOX = ""  # the key of the user's own sandbox; a session's is never empty

_Key = tuple[str, str, str]  # user id, sandbox key, file type


def sandbox_key(session_id: str | None) -> str:
    """The sandbox's key: its directory name (``dir_names.safe_dir_name``: injective and
    at most ~153 characters, whatever the session id's length), "" for the user's own."""
    return USER_SANDBOX if session_id is None else safe_dir_name(session_id)


def root_key(identity: str) -> str:
    """The provider identity as stored: its SHA-256, 64 hex digits. A root path can be
    thousands of characters long and is part of the primary key of every row; the hash
    keeps rows and index entries small and of one size, needs no length rule, and keeps the
    host's paths out of the database (the row is only ever matched, never read back)."""
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()


def provider_identity(provider: SandboxProvider) -> str | None:
    """The provider's identity (``IdentifiedSandboxProvider``), looked for beneath the
    deadline wrapper ``Memstrata.open`` puts around every provider; ``None`` without one."""
    if isinstance(provider, TimedSandboxProvider):
        provider = provider.inner
    if isinstance(provider, IdentifiedSandboxProvider):
        return provider.identity()
    return None


class SyncedVersions:
    """The versions, in the database under ``identity`` or, without one, in this process
    (module doc). Database calls run on a worker thread."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        identity: str | None,
        *,
        limit: int = MAX_SYNCED_FILES,
    ) -> None:
        self._sessions = sessions
        self._root = None if identity is None else root_key(identity)
        self._limit = limit
        self._mutex = threading.Lock()  # shared by the threads of every loop using a service
        self._local: OrderedDict[_Key, int] = OrderedDict()

    async def get(self, user_id: str, session_id: str | None, kind: FileKind) -> int | None:
        key = (user_id, sandbox_key(session_id), kind.file_type)
        if self._root is None:
            with self._mutex:
                return self._local.get(key)
        return await anyio.to_thread.run_sync(self._get, self._root, key)

    async def note(
        self, user_id: str, session_id: str | None, kind: FileKind, version: int
    ) -> None:
        key = (user_id, sandbox_key(session_id), kind.file_type)
        if self._root is None:
            with self._mutex:
                self._local[key] = version
                self._local.move_to_end(key)
                while len(self._local) > self._limit:
                    self._local.popitem(last=False)
            return
        await anyio.to_thread.run_sync(self._note, self._root, key, version)

    async def noted(
        self, t: Target, kind: FileKind, result: SyncResult, known: int | None
    ) -> SyncResult:
        """``result``, its version noted when the sync left the file equal to a DB version
        (what its copy starts from) and ``known`` (the note read) does not say it already.
        Called under the sandbox's lock (module doc). A note that cannot be written leaves
        the one before, which lags: logged as ``sync.note_failed``, the result stands."""
        if result.base is None or result.version != result.base.version:
            return result
        if result.base.version == known:
            return result
        try:
            await self.note(t.user_id, t.session_id, kind, result.base.version)
        except (SQLAlchemyError, DatabaseSetupError) as exc:
            log_failure(
                logger,
                "sync.note_failed",
                exc,
                user_id=t.user_id,
                session_id=t.session_id,
                file=kind.filename,
            )
        return result

    def _note(self, root: str, key: _Key, version: int) -> None:
        user_id, sandbox, file_type = key
        with transaction(self._sessions) as session:
            SyncedRepository(session, user_id).note(root, sandbox, file_type, version)

    def _get(self, root: str, key: _Key) -> int | None:
        user_id, sandbox, file_type = key
        with self._sessions() as session:
            return SyncedRepository(session, user_id).get(root, sandbox, file_type)

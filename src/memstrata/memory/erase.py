"""Erase one user: every per-user table, the caches, the sandboxes (a GDPR erasure request;
docs/DEPLOY.md, "Erasing a user").

One transaction deletes the user's rows from ``user_memory``, ``memory_embeddings``,
``memory_index_snapshots`` and ``user_skill_configs``, each through its repository, and
bumps ``memory_index_state.generation`` with the removals counted, so every process's
cached index of the user drops the rows at its next use. The state row itself stays (the
user id and three counters, no content): deleted, a later write under the same id would
start the generation at 1 again, and a process still holding an index of the erased user
at that generation would take it for current and go on serving the erased rows.

Locks, in the order the writers take them (so an erase and a write never wait on each
other in a circle): the user's ``user_memory`` rows (a file write in flight on one of them
finishes first and is deleted with the rest), then the user's index lock
(``EmbeddingRepository.lock``: a turn or memory-file write holding it finishes first), then
``user_memory`` again, for files that writers holding the index lock created meanwhile.
So a concurrent write either commits before the erase — and is erased, text and search
rows together — or waits for it and commits after, as a new user's first write: an
``If-Match`` write of a version from before gets 409 (the file is gone), an unconditional
write or a provisioning stores version 1, a turn gets rows in an empty index, a skill
switch a new row.

After the commit: the AgentPool invalidation (NOTIFY, as a write sends) and this process's
search index of the user, brought to the new, empty state. The sandboxes are removed
through the provider's optional hook (``sandbox.base.ErasableSandboxProvider``) before the
transaction — a sandbox that cannot be removed stops the erasure before anything is
deleted, since a session start would read its files back into memory — and again after it,
for what a session start or a write's mirror put there meanwhile. A provider without the
hook is skipped, and the erasure says so. Erasing again is harmless: nothing left is
nothing deleted, and a user never seen gets no state row.

An id that today's rule refuses (``validate_user_id``: control characters, whitespace at an
end) can still be erased when the database holds rows under it — stored before the rule
existed (``erasable_user_id``); every other path goes on refusing it.

The same transaction deletes the versions the user's sandbox files were last synced at
(``sandbox_synced``, ``sandbox.synced``), under every provider identity: no content, so not
counted in ``deleted``, but kept they would outlive the sandboxes and not match a later
user under the same id, whose versions start again at 1 (copies kept aside for nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import InvalidUserIdError, SandboxError
from memstrata.logs import AUDIT_LOGGER, log_event, log_failure
from memstrata.memory.kinds import USER_ID_MAX_LENGTH, StoredUserId, validate_user_id
from memstrata.memory.repository import MemoryFileRepository
from memstrata.retrieval.query_cache import CachedQueryEmbedder
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.snapshot_repository import SnapshotRepository
from memstrata.sandbox.base import ErasableSandboxProvider, SandboxProvider
from memstrata.sandbox.synced_repository import SyncedRepository
from memstrata.skills.repository import UserSkillConfigRepository
from memstrata.text import unstorable_text

logger = logging.getLogger(__name__)

SandboxOutcome = Literal["removed", "absent", "skipped"]


class Invalidator(Protocol):
    """What the erasure needs of the AgentPool."""

    def invalidate(self, user_id: str) -> None: ...


@dataclass(frozen=True)
class Erasure:
    """What one erasure did."""

    user_id: str
    # Rows deleted per table (user_memory, memory_embeddings, memory_index_snapshots,
    # user_skill_configs).
    deleted: Mapping[str, int]
    # memory_index_state.generation afterwards: bumped when search rows went, 0 for a user
    # who never had any (and then no state row).
    generation: int
    # The user's sandboxes: "removed", "absent" (there were none), or "skipped" (the
    # provider has no erase_user hook).
    sandbox: SandboxOutcome

    @property
    def found(self) -> bool:
        """Whether anything of the user was there."""
        return any(self.deleted.values()) or self.sandbox == "removed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "deleted": dict(self.deleted),
            "index_generation": self.generation,
            "sandbox": self.sandbox,
        }


class UserEraser:
    """Erases users of one database and one sandbox provider (module doc)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        sandboxes: SandboxProvider,
        *,
        pool: Invalidator | None = None,
        search: SearchService | None = None,
    ) -> None:
        self.sessions = sessions
        self.sandboxes = sandboxes
        self.pool = pool
        self.search = search

    def erase(self, user_id: str) -> Erasure:
        """Erase ``user_id`` (module doc). Blocking. ``InvalidUserIdError`` before anything
        is touched; ``SandboxError`` when the sandbox cannot be removed — before the
        transaction nothing was deleted, after it the rows are gone and the message says
        to run it again."""
        user_id = erasable_user_id(self.sessions, user_id)
        eraser = self.sandboxes if isinstance(self.sandboxes, ErasableSandboxProvider) else None
        if eraser is None:
            log_event(
                logger,
                "user.erase.sandbox_skipped",
                logging.WARNING,
                user_id=user_id,
                provider=repr(self.sandboxes),
                detail="the sandbox provider has no erase_user hook: remove the sandbox by hand",
            )
        removed = eraser.erase_user(user_id) if eraser is not None else False
        deleted, generation = self._delete_rows(user_id)
        self._forget(user_id)
        if eraser is not None:
            try:
                removed = eraser.erase_user(user_id) or removed
            except SandboxError as exc:
                log_failure(
                    logger, "user.erase.sandbox_failed", exc, user_id=user_id, deleted=deleted
                )
                raise SandboxError(
                    f"the rows of {user_id!r} are erased ({_counts(deleted)}), but files written "
                    f"to the sandbox meanwhile could not be removed: {exc} — run the erase "
                    "again"
                ) from exc
        sandbox: SandboxOutcome = (
            "skipped" if eraser is None else "removed" if removed else "absent"
        )
        erasure = Erasure(str(user_id), deleted, generation, sandbox)  # a plain str again
        log_event(
            # The operator's record of the request: logged whatever the level
            # (memstrata.service_logging).
            logging.getLogger(AUDIT_LOGGER),
            "user.erased",
            user_id=user_id,
            generation=generation,
            sandbox=sandbox,
            deleted=deleted,
        )
        return erasure

    def _delete_rows(self, user_id: str) -> tuple[dict[str, int], int]:
        with transaction(self.sessions) as session:
            files = MemoryFileRepository(session, user_id)
            index = EmbeddingRepository(session, user_id)
            file_rows = files.delete_all()  # waits for a write in flight on one of them
            skills = UserSkillConfigRepository(session, user_id).delete_all()
            index.lock()  # waits for index writers in flight
            file_rows += files.delete_all()  # files those writers created meanwhile
            rows = index.erase_rows()
            snapshots = SnapshotRepository(session, user_id).erase_snapshots()
            SyncedRepository(session, user_id).delete_all()
            # A user never indexed gets no state row; one whose rows were all gone
            # already needs no bump (no index can hold them at the current generation).
            generation = index.bump_generation() if rows else index.state().generation
        deleted = {
            "user_memory": file_rows,
            "memory_embeddings": rows,
            "memory_index_snapshots": snapshots,
            "user_skill_configs": skills,
        }
        return deleted, generation

    def _forget(self, user_id: str) -> None:
        """Drop the user's cached agents here and in every process (NOTIFY; a failure is
        logged by the pool) and bring this process's search index of the user to the
        erased state, so the rows' texts leave its memory now rather than at its next
        search (a user it did not hold costs one empty load)."""
        if self.pool is not None:
            self.pool.invalidate(user_id)
        if self.search is not None:
            if isinstance(self.search.embedder, CachedQueryEmbedder):
                self.search.embedder.forget_user(user_id)  # keys hold their search texts
            try:
                self.search.cache.get(user_id, self.search.model)
            except Exception as exc:  # the next search reloads it anyway: the generation
                log_failure(logger, "user.erase.cache_failed", exc, user_id=user_id)


# Is anything stored under an id, in any table an erasure deletes from or bumps? The index
# state too: it outlives an erasure, so erasing such an id again finds it (and nothing
# else), as it would a valid id, and finishes a sandbox removal cut short.
_STORED = text(
    """
    SELECT EXISTS (SELECT 1 FROM user_memory WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM memory_embeddings WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM user_skill_configs WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM memory_index_state WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM memory_index_snapshots WHERE user_id = :user)
        OR EXISTS (SELECT 1 FROM sandbox_synced WHERE user_id = :user)
    """
)


def erasable_user_id(sessions: sessionmaker[Session], user_id: str) -> str:
    """``user_id`` if today's rule takes it (``validate_user_id``); else, when the database
    holds rows under it — an id stored before the rule refused it —, the same id as a
    ``StoredUserId``, which the repositories and the sandbox take for this erasure: erasing
    existing data must always be possible. Else the rule's ``InvalidUserIdError``, saying
    that nothing is stored under the id either."""
    try:
        return validate_user_id(user_id)
    except InvalidUserIdError as refused:
        if not _storable(user_id):
            raise
        with sessions() as session:
            if session.execute(_STORED, {"user": user_id}).scalar():
                return StoredUserId(user_id)
        raise InvalidUserIdError(f"{refused}; and nothing is stored under that id") from None


def _storable(user_id: object) -> bool:
    """Could the tables hold rows under ``user_id``? Their ``user_id`` columns hold at most
    ``USER_ID_MAX_LENGTH`` characters of PostgreSQL text: no NUL, only valid UTF-8 (no lone
    surrogate). Any other id was never stored, and is not looked for."""
    if not isinstance(user_id, str) or len(user_id) > USER_ID_MAX_LENGTH:
        return False
    return unstorable_text(user_id, "user_id") is None


def _counts(deleted: Mapping[str, int]) -> str:
    return ", ".join(f"{table} {count}" for table, count in deleted.items())

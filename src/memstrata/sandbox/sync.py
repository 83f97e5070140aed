"""Dual-write sync between the database (source of truth) and the agent's sandbox.

The five scenarios of spec 4, one public coroutine each:

==============  ======================================  ====================================
scenario        direction                               method
==============  ======================================  ====================================
new user        template → DB → sandbox                 :meth:`SyncService.provision_user`
agent edit      sandbox → DB right after the write;     :meth:`~SyncService.after_controlled_write`
                dirty files again at round end          :meth:`~SyncService.end_round`
frontend edit   DB → sandbox (force), then AgentPool    :meth:`~SyncService.frontend_edit`
new session     sandbox-first                           :meth:`~SyncService.start_session`
AGENTS.md       template → sandbox, never read back     all of the above
==============  ======================================  ====================================

Every DB write goes through the one write path (``MemoryStore.upsert_memory_file``: version
check, embedding, one transaction). The read-back rule is :func:`memstrata.sandbox.rule.decide`,
carried out by :mod:`memstrata.sandbox.reconcile`, which also owns the failure policy:
a failing sandbox is a warning and never blocks or rolls back a DB write; an unreachable DB
during a read-back leaves the edit in the sandbox, the round tracker keeps the file dirty,
and the next round end or session start writes it back. Only the frontend edit, whose DB
write *is* the main flow, lets DB errors and version conflicts propagate.

The service's state and the steps every scenario shares (its target, its locks, one
file's read-back) are in :mod:`memstrata.sandbox.sync_core`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from memstrata.errors import InvalidFileTypeError
from memstrata.logs import describe, log_event
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind, parse_kind
from memstrata.memory.store import MemoryFile, check_expected_version, validate_content
from memstrata.sandbox import db_only, follow_on
from memstrata.sandbox.base import Sandbox, root_memory_file
from memstrata.sandbox.claims import Claim
from memstrata.sandbox.dirty import SYNCED_FILES, RoundTracker, mark_missing
from memstrata.sandbox.follow_on import CacheInvalidator
from memstrata.sandbox.notices import reported
from memstrata.sandbox.reconcile import AGENTS_FILE, DB_ERRORS
from memstrata.sandbox.results import (
    AGENT_WRITE,
    FRONTEND,
    PROVISION,
    ROUND_END,
    SESSION,
    SESSION_END,
    Outcome,
    SandboxEdit,
    Scenario,
    SyncResult,
    gone,
    open_sandbox,
    sharing,
)
from memstrata.sandbox.sync_core import SyncCore

__all__ = ["CacheInvalidator", "Outcome", "SyncResult", "SyncService"]

logger = logging.getLogger(__name__)


class SyncService(SyncCore):
    """The five sync scenarios over one store and one sandbox provider.

    ``pool`` is invalidated after frontend edits. Operations on one user are serialised
    within this service, across the event loops and threads that share it (a loop per
    thread is fine); across processes each sync of a sandbox holds that sandbox's own lock
    when it has one (:meth:`sandbox_lock`), and the DB's optimistic lock and the merge rule
    keep concurrent edits from being lost.
    """

    # -- scenario 1: new user --------------------------------------------------------------

    async def provision_user(self, user_id: str) -> list[FileKind]:
        """Template → DB (idempotent, indexed by the write path) → sandbox; returns the
        kinds created in the DB.

        DB errors propagate: creating the user is the main flow. A sandbox file that
        already has content is kept (``kept``) for the next session start to reconcile.
        """
        created = await self.db.provision(user_id)
        t = self._target(user_id, None, PROVISION)
        async with self.user_lock(user_id):
            for kind in USER_FILE_KINDS:
                file = await self.db.get(user_id, kind)
                if file is not None:
                    await self._files.provision(t, kind, file)
            await self._files.push_agents(t)
        log_event(
            logger,
            "sync.provision",
            user_id=user_id,
            direction="template->db->sandbox",
            created=[k.filename for k in created],
        )
        return created

    # -- scenario 2: agent edits -------------------------------------------------------------

    async def after_controlled_write(
        self,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        *,
        sandbox: Sandbox | None = None,
        tracker: RoundTracker | None = None,
    ) -> SyncResult:
        """Sync one root memory file right after a controlled tool wrote it.

        ``sandbox`` overrides ``sandboxes.for_user(user_id, session_id)``; ``tracker``
        supplies the round-start base when the sandbox has no base record. A write that
        reached AGENTS.md restores the template: AGENTS.md is never read back.
        """
        t = self._target(user_id, session_id, AGENT_WRITE, sandbox)
        name = root_memory_file(filename, case_sensitive=t.sandbox.case_sensitive)
        if name is None:
            raise InvalidFileTypeError(f"{filename!r} is not a root memory file")
        async with self.user_lock(user_id):
            if name == AGENTS_FILE:
                return await self._files.push_agents(t)
            fallback = None if tracker is None else tracker.base(name)
            # An MCP call's tracker is no start's: every open start counts as another's
            # (its agent may be the caller, which memstrata cannot tell): the safe mistake.
            t = await self._marks.shared(self._sessions, t, mine=self._trackers.started(tracker))
            return await self._read_back(t, parse_kind(name), fallback)

    async def write_without_sandbox(
        self,
        user_id: str,
        kind: FileKind,
        edit: Callable[[str], str],
        *,
        edited: SandboxEdit | None = None,
        session_id: str | None = None,
        sandbox: Sandbox | None = None,
        tracker: RoundTracker | None = None,
    ) -> SyncResult:
        """Store a tool's edit in the DB alone, for a tool whose sandbox write failed (or
        whose sandbox could not be brought in line with the DB first).

        ``edited`` is the sandbox copy the tool read and its edit of it: that text is
        stored by the read-back rule against the sync base (the sandbox's base record, or
        ``tracker``'s), so an earlier edit still waiting in the sandbox copy is stored with
        this one rather than overwritten; a copy that only lags behind the DB, a conflict
        with a change made meanwhile, or no ``edited`` at all stores ``edit`` applied to the
        DB copy (:func:`memstrata.sandbox.db_only.store_edit`).
        Either way the memory is not lost with the sandbox, and the next read-back pushes
        the new DB copy to it (the result's ``base`` says what its copy is compared with).
        Call it under :meth:`user_lock`. Exceptions raised by ``edit`` propagate.
        """
        t = self._target(user_id, session_id, AGENT_WRITE, sandbox)
        fallback = None if tracker is None else tracker.base(kind.filename)
        # The record it leaves keeps the copies another open session's agent may have read.
        t = await self._marks.shared(self._sessions, t, mine=self._trackers.started(tracker))
        return await db_only.store_edit(self.db, t, kind, edit, edited, fallback)

    async def begin_round(
        self, user_id: str, session_id: str | None = None, *, sandbox: Sandbox | None = None
    ) -> RoundTracker:
        """A tracker for the coming round, holding the current DB versions as its base
        (``sandbox``: the session's, when the caller has it open already). While anything
        refers to it, a frontend edit's mirror that settles its sandbox's copy (merges the
        agent's edit, or keeps it aside) tells it, for :meth:`end_round` to report."""
        if sandbox is None:
            sandbox = open_sandbox(self.sandboxes, user_id, session_id)
        case_sensitive = sandbox.case_sensitive
        bases = await self._snapshot(user_id)
        tracker = RoundTracker(
            user_id, session_id, bases=bases or {}, case_sensitive=case_sensitive
        )
        self._trackers.watch(tracker)
        return tracker

    async def end_round(self, tracker: RoundTracker) -> list[SyncResult]:
        """Fallback read-back: if a dirty file changed after its last controlled write
        (an unguarded tool touched it), reconcile SOUL, USER and MEMORY, as the spec's
        fallback reads the DB-backed files back; dirty files that a memory tool or a
        guarded file tool already wrote through cost nothing. AGENTS.md is restored if a
        write touched it. Files whose read-back failed stay dirty, with their old base,
        for the next round end.

        Also reported: what a frontend edit's mirror in this process did to the sandbox's
        copy since the last round end (merged the agent's edit, or kept it aside), as the
        round end's own read-back reports it when the edit comes from another process
        (:func:`memstrata.sandbox.notices.reported`)."""
        sandbox = None  # opened once here or by ``_target``; a round without a read-back opens none
        if tracker.asks_for_missing:  # a shell's ``mv MEMORY.md memory.md``
            sandbox = open_sandbox(self.sandboxes, tracker.user_id, tracker.session_id)
            await mark_missing(tracker, sandbox)
        if not tracker.dirty and not tracker.agents_touched:
            return reported([], tracker.take_notices())
        t = self._target(tracker.user_id, tracker.session_id, ROUND_END, sandbox)
        results: list[SyncResult] = []
        async with self.user_lock(tracker.user_id):
            if tracker.needs_read_back:
                mine = self._trackers.started(tracker)
                t = await self._marks.shared(self._sessions, t, mine=mine)
                for kind in USER_FILE_KINDS:
                    fallback = tracker.base(kind.filename)
                    results.append(gone(t, fallback, await self._read_back(t, kind, fallback)))
            if tracker.agents_touched:
                results.append(await self._files.push_agents(t))
            failed = [r.filename for r in results if r.needs_retry and r.filename in SYNCED_FILES]
            bases = await self._snapshot(tracker.user_id)
            notices = tracker.take_notices()  # under the lock: no mirror runs in between
        if bases is not None:
            for name in failed:
                old = tracker.base(name)
                if old is not None:
                    bases[name] = old
        tracker.start_next_round(bases, still_dirty=failed)
        return reported(results, notices)

    # -- scenario 3: frontend edit -------------------------------------------------------------

    async def read_file(self, user_id: str, kind: str | FileKind) -> tuple[MemoryFile, bool]:
        """The DB copy as the frontend reads it (REST GET, MCP, the web page), and whether
        the user had to be provisioned from the templates first. ``kind``: as
        ``parse_kind`` takes it (``FileKind.USER``, ``"user"``, ``"USER.md"``).

        An If-Match write of this file already under way here is waited for (at most
        ``claims.WRITE_WAIT_S``): a writer that just lost the race to it then reads the
        version it lost to, instead of the old one it would lose with again.
        """
        kind = parse_kind(kind)  # the claims are held under the kind, not its names
        file = await self._claims.read(user_id, kind)
        if file is not None:
            return file, False
        await self.provision_user(user_id)
        file = await self.db.get(user_id, kind)
        if file is None:
            raise RuntimeError(f"provisioning {user_id!r} did not create {kind.filename}")
        return file, True

    async def frontend_edit(
        self,
        user_id: str,
        kind: str | FileKind,
        content: str,
        expected_version: int | None = None,
    ) -> MemoryFile:
        """The write path, then its follow-on effects in order: mirror, invalidate.

        DB errors and ``VersionConflictError`` propagate (HTTP 409), before anything else
        happens. Returns the frontend's own write. Once the write is under way it runs to
        the end with its follow-on effects even if the calling task is cancelled (a server
        shutting down cuts requests off): see :meth:`WritesInFlight.run
        <memstrata.sandbox.tasks.WritesInFlight.run>` and :meth:`settle`.
        """
        k = parse_kind(kind)
        # Content first (422/413 before 409): an invalid write must neither hold the claim,
        # so that a valid writer on the same version is refused while it fails, nor tell its
        # client to reload and retry what would fail again.
        validate_content(content, self.store.max_content_bytes)
        check_expected_version(expected_version)
        previous, mine = await self._claims.begin(user_id, k, expected_version, content)
        write = self._write_through(user_id, k, content, expected_version, previous, mine)
        return await self._writes.run(user_id, write)

    async def _write_through(
        self,
        user_id: str,
        k: FileKind,
        content: str,
        expected_version: int | None,
        previous: MemoryFile | None,
        mine: Claim | None,
    ) -> MemoryFile:
        # Outside the user lock: the store re-checks the version in its transaction, and a
        # read-back racing this write loses that check and decides again.
        file = await self._claims.write(user_id, k, content, expected_version, mine)
        front = self._target(user_id, None, FRONTEND)
        outcome = Outcome.WRITTEN if file.changed else Outcome.UNCHANGED
        front.result(k.filename, "frontend->db", outcome, file.version)
        async with self.user_lock(user_id):
            await self._mirror(user_id, k, previous)
        await self.invalidate(user_id)
        return file

    async def settle(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the frontend edits still under way, including those
        whose caller was cancelled; returns how many are still running. A server calls it
        when it stops, before the event loop ends (which would cancel them)."""
        return await self._writes.settle(timeout_s)

    async def _mirror(self, user_id: str, kind: FileKind, previous: MemoryFile | None) -> None:
        """Follow-on step 1 (:func:`memstrata.sandbox.follow_on.mirror`): the user's sandbox
        and every session sandbox this service started, one after another; a sandbox copy
        it settled is told to the round trackers on that sandbox."""
        sessions = [None, *self.open_sessions(user_id)]
        targets = (self._target(user_id, session_id, FRONTEND) for session_id in sessions)
        for t, result in await follow_on.mirror(self._files, targets, kind, previous):
            self._trackers.tell(t.user_id, t.session_id, result)

    async def invalidate(self, user_id: str) -> None:
        """Follow-on step 2 (:func:`memstrata.sandbox.follow_on.invalidate`): drop the user's
        cached agents in every process; also after an MCP agent's write."""
        await follow_on.invalidate(self.pool, user_id)

    # -- scenarios 4 and 5: session start --------------------------------------------------

    async def start_session(self, user_id: str, session_id: str | None = None) -> list[SyncResult]:
        """Sandbox-first sync of SOUL/USER/MEMORY, then AGENTS.md from the template.

        Missing DB rows are provisioned from the templates first, so a brand-new user's
        first session works too. Sessions of the user closed since — in this process, or
        in any when the provider can tell which are open (:mod:`memstrata.sandbox.sessions`)
        — are read back first (:meth:`end_session`); their results come first, each with
        ``closed_session`` set, so that an earlier session's edit kept aside reaches the
        caller. With the DB unreachable the sandbox is left as it is. Each start is open
        until :meth:`end_session` (with ``None`` too, for the user's own sandbox): while
        another is open on the same sandbox, a start keeps the copies earlier pushes
        replaced rather than settling the base on the current copy.
        """
        box = open_sandbox(self.sandboxes, user_id, None)  # the user's: marks live there
        # Asked before this start holds the sandbox (``sessions`` module doc).
        shared = await self._marks.another_holds(self._sessions, user_id, session_id, mine=False)
        async with self._marks.opening(box, user_id, session_id) as hold:
            scenario = sharing(SESSION) if shared else SESSION
            results = await self._start(user_id, session_id, box, scenario)
            self._sessions.began(user_id, session_id, hold)
        return results

    async def _start(
        self, user_id: str, session_id: str | None, box: Sandbox, scenario: Scenario
    ) -> list[SyncResult]:
        t = self._target(user_id, session_id, scenario)
        results: list[SyncResult] = []
        async with self.user_lock(user_id):
            try:
                await self.db.provision(user_id)
            except DB_ERRORS as exc:
                for kind in USER_FILE_KINDS:
                    results.append(
                        t.result(kind.filename, "none", Outcome.DB_UNAVAILABLE, None, describe(exc))
                    )
            else:
                settle = partial(self._settle_closed, user_id, results)
                await self._marks.read_back(self._sessions, box, user_id, session_id, settle)
                for kind in USER_FILE_KINDS:
                    results.append(await self._read_back(t, kind, None))
            results.append(await self._files.push_agents(t))
        return results

    def end_session(self, user_id: str, session_id: str | None) -> None:
        """Stop pushing frontend edits to this session's sandbox (once every
        ``start_session`` of it has ended), and note it for a read-back. ``None``: a
        session on the user's own sandbox ended (no longer keeping a later start there
        from settling its base, :meth:`start_session`).

        The user's next :meth:`start_session` — in this service, or in any process once the
        session's hold is released (:mod:`memstrata.sandbox.sessions`) — reads the closed
        session's files back first (:meth:`read_back_session`): an edit made in its last
        round that no read-back saw (a shell ``echo >> MEMORY.md``) would otherwise stay in
        a directory no later session opens. A host that can await may also call
        :meth:`read_back_session` when the session closes. Synchronous:
        ``AgentSession.close`` and its finalizer call it."""
        self._sessions.ended(user_id, session_id)

    async def read_back_session(self, user_id: str, session_id: str) -> list[SyncResult]:
        """The read-back rule for SOUL/USER/MEMORY of a session's sandbox (one that closed,
        :meth:`end_session`): its edits reach the DB, merged or kept aside as at a round end."""
        t = self._target(user_id, session_id, SESSION_END)
        async with self.user_lock(user_id):
            return [await self._read_back(t, kind, None) for kind in USER_FILE_KINDS]

    async def _settle_closed(self, user_id: str, into: list[SyncResult], session_id: str) -> bool:
        """A closed session read back at a start (under the user lock), its results added to
        ``into`` (the start's, tagged ``closed_session``); whether it settled: one that did
        not is tried again at the next (``ReadBackMarks.read_back``)."""
        results = await self.read_back_session(user_id, session_id)
        into.extend(replace(r, closed_session=session_id) for r in results)
        return not any(r.needs_retry for r in results)

    def open_sessions(self, user_id: str) -> list[str]:
        """The session sandboxes a frontend edit of ``user_id`` is pushed to, besides the
        user's own."""
        return self._sessions.open_sessions(user_id)

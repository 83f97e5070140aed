"""The executor of the read-back rule, behind :class:`~memstrata.sandbox.sync.SyncService`.

:func:`memstrata.sandbox.rule.decide` says what to do with one file; :class:`Reconciler`
does it: reads the sandbox, the DB row and the base (the ``.memstrata/base`` record, else
the caller's fallback), carries out the action, and on a lost race reads the DB again and
asks the rule again, at most ``MAX_WRITE_ATTEMPTS`` writes; then the DB copy wins.

Every file handled yields one :class:`SyncResult` and one ``sync.file`` log event with the
scenario, direction and result (spec 6). Failure policy, in one place: sandbox failures of
any kind become ``sandbox_failed`` results (spec 5); an unreachable DB becomes
``db_unavailable`` and leaves the sandbox untouched; content the DB refuses is kept aside
(``rejected``) and the DB copy restored.

The base is the sandbox's base record, else the caller's fallback (:func:`choose_base`) —
except a :class:`~memstrata.sandbox.dirty.SeenBase` at least as new as the record: the
sandbox's own session saw its copy reach that base after the record was last written, so
the record is stale (its write failed, or the agent's write went to the DB alone).

The sandbox side — the base record, the push that records its base before writing the
file, and the copies kept aside (``preserve``, ``reject``) — is :mod:`memstrata.sandbox.push`.
Right before writing the file, a push reads it again: a file changed since it was read (a
shell ``echo >>``, an unguarded tool, the DB write and embedding in between) is not written
over; the file is decided again (:data:`MAX_MOVED_ATTEMPTS` times, then left as it is for
the next read-back), so the new edit is merged or kept aside. Each reconcile, provision and
DB-only store holds the sandbox's ``exclusive()`` lock, when it has one
(:mod:`memstrata.sandbox.exclusive`), from its first read to its last write: another
process's sync of the same sandbox cannot come in between; the DB version a reconcile or
provision leaves the file at is noted under it too (:mod:`memstrata.sandbox.synced`).

An agent's edit whose sandbox write failed is stored by the same rule against the same
base, under the same lock (:func:`locked`), in :mod:`memstrata.sandbox.db_only`.

The result, scenario and target types and the small pure helpers it uses are in
:mod:`memstrata.sandbox.results`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

import anyio.to_thread
from sqlalchemy.exc import SQLAlchemyError

from memstrata.errors import (
    DatabaseSetupError,
    InvalidContentError,
    SandboxEncodingError,
    SandboxFileTooLargeError,
    VersionConflictError,
)
from memstrata.logs import describe
from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.exclusive import exclusive
from memstrata.sandbox.push import (
    DB_TO_SANDBOX,
    Moved,
    agreed,
    agreed_after,
    preserve,
    provision_copy,
    push,
    read_base,
    record_sync_base,
    reject,
)
from memstrata.sandbox.results import Outcome, SyncResult, Target, choose_base
from memstrata.sandbox.rule import (
    Action,
    Merge,
    Preserve,
    Push,
    Stored,
    SyncBase,
    WriteBack,
    decide,
    trusted,
)
from memstrata.sandbox.synced import SyncedVersions

# What "the database is unreachable" looks like from the store.
DB_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, DatabaseSetupError)
# A write-back that keeps losing races against other writers gives up and lets the DB win.
MAX_WRITE_ATTEMPTS = 3
# A file that keeps changing under a push is decided again this many times, then left.
MAX_MOVED_ATTEMPTS = 3
AGENTS_FILE = FileKind.AGENTS.filename
SANDBOX_TO_DB = "sandbox->db"
AGENT_TO_DB = "agent->db"  # a tool's edit stored while its sandbox could not be written


def _matches(base: SyncBase | None, file: MemoryFile, *, settles: bool) -> bool:
    # Fields, not ==: a SeenBase never equals a SyncBase, and the record needs no rewrite
    # (unless a controlled write's sync settles a copy its push replaced, module doc).
    return (
        base is not None
        and (not base.older or not settles)
        and (base.version, base.content) == (file.version, file.content)
    )


async def decide_in_thread(
    text: str | None,
    db: Stored | None,
    base: SyncBase | None,
    *,
    db_authoritative: bool = False,
    pushed: int | None = None,
) -> Action:
    """:func:`decide` on a worker thread: merging two edits of a 256 KB file can take the
    merge's whole deadline (~0.5 s of CPU), which every other request on the event loop
    would wait for."""
    rule = partial(decide, text, db, base, db_authoritative=db_authoritative, pushed=pushed)
    return await anyio.to_thread.run_sync(rule)


def _lock_failed(t: Target, name: str, exc: Exception) -> SyncResult:
    direction = DB_TO_SANDBOX if t.scenario.db_authoritative else SANDBOX_TO_DB
    return t.result(name, direction, Outcome.SANDBOX_FAILED, None, f"lock: {describe(exc)}")


async def locked(
    t: Target,
    kind: FileKind,
    run: Callable[[], Awaitable[SyncResult]],
    unlocked: Callable[[Exception], Awaitable[SyncResult]] | None = None,
) -> SyncResult:
    """``run()`` under the sandbox's lock (module doc); if it cannot be taken,
    ``unlocked(error)`` or a ``sandbox_failed`` result."""
    lock = exclusive(t.sandbox)
    try:
        await lock.__aenter__()
    except Exception as exc:
        if unlocked is not None:
            return await unlocked(exc)
        return _lock_failed(t, kind.filename, exc)
    try:
        return await run()
    finally:
        await lock.__aexit__(None, None, None)


class Reconciler:
    """Carries out :func:`~memstrata.sandbox.rule.decide` for one file (module doc)."""

    def __init__(self, db: AsyncStore, templates: TemplateSet, synced: SyncedVersions) -> None:
        self.db = db
        self.templates = templates
        self.synced = synced

    async def reconcile(self, t: Target, kind: FileKind, fallback: SyncBase | None) -> SyncResult:
        """The rule for one file, under the sandbox's lock, decided again while the file
        changes under its push (module doc)."""

        async def run() -> SyncResult:
            known: list[int | None] = []  # the version noted, once read (``sandbox.synced``)
            result = await self._until_settled(t, kind, fallback, known)
            return await self.synced.noted(t, kind, result, known[0] if known else None)

        return await locked(t, kind, run)

    async def _until_settled(
        self, t: Target, kind: FileKind, fallback: SyncBase | None, known: list[int | None]
    ) -> SyncResult:
        # The record as the first attempt read it: a push that raised Moved wrote its record
        # but not the file, whose copy never held what that record names.
        before: list[SyncBase | None] = []
        for _ in range(MAX_MOVED_ATTEMPTS):
            try:
                return await self._reconcile(t, kind, fallback, before, known)
            except Moved:
                continue
        detail = "the file kept changing while it was synced; left as it is"
        return t.result(kind.filename, DB_TO_SANDBOX, Outcome.SANDBOX_FAILED, None, detail)

    async def _reconcile(
        self,
        t: Target,
        kind: FileKind,
        fallback: SyncBase | None,
        before: list[SyncBase | None],
        known: list[int | None],
    ) -> SyncResult:
        name = kind.filename
        try:
            text = await t.sandbox.read_text(name)
        except SandboxEncodingError as exc:
            # Not a failing sandbox but content the DB cannot take: kept aside (byte for
            # byte where the sandbox stores bytes: ``exc.text`` is an ``Undecodable``, and
            # the U+FFFD text alone would lose every character of a GBK or Shift-JIS
            # file), DB copy restored — or it stays broken and dirty for good, and a
            # frontend push would overwrite it without a copy.
            return await reject(self.db, t, kind, exc.text, exc)
        except SandboxFileTooLargeError as exc:
            # Too large to read, so it cannot be kept aside either: left as it is, not
            # pushed over even by a frontend edit (the DB has that edit; the sandbox follows
            # once the file is shrunk or removed).
            detail = f"{describe(exc)}; left in place"
            return t.result(name, DB_TO_SANDBOX, Outcome.SANDBOX_FAILED, detail=detail)
        except Exception as exc:
            if not t.scenario.db_authoritative:
                return t.result(name, SANDBOX_TO_DB, Outcome.SANDBOX_FAILED, detail=describe(exc))
            text = None  # unreadable: nothing to protect; the push reports any failure
            unreadable = True
        else:
            unreadable = False
        record = before[0] if before else await read_base(t, kind)
        before[:] = [record]
        if t.scenario.shared and record is not None:
            t = replace(t, kept=(*record.older, record.content))
        # What a push would replace: the copy read, else (unreadable) what the record says
        # the sandbox holds, so a record written ahead of a failed write stays as telling.
        replacing = (None if record is None else record.content) if unreadable else text
        if not known:
            try:
                known.append(await self.synced.get(t.user_id, t.session_id, kind))
            except DB_ERRORS as exc:
                return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, detail=describe(exc))
        pushed = known[0]
        merged = False
        for _ in range(MAX_WRITE_ATTEMPTS):
            try:
                db = await self.db.get(t.user_id, kind)
            except DB_ERRORS as exc:
                return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, detail=describe(exc))
            # A record the agent removed, garbled or put back is no base (``rule.trusted``).
            usable = trusted(record, db, pushed)
            base = choose_base(usable, fallback)
            authoritative = t.scenario.db_authoritative
            action = await decide_in_thread(
                text, db, base, db_authoritative=authoritative, pushed=pushed
            )
            if isinstance(action, WriteBack | Merge):
                assert text is not None  # the rule only ever writes sandbox text back
                merged = merged or isinstance(action, Merge)
                try:
                    written = await self.db.upsert(
                        t.user_id, kind, action.content, action.expected, skip_unchanged=True
                    )
                except VersionConflictError:
                    continue  # another writer won the race: read again, decide again
                except InvalidContentError as exc:
                    return await reject(self.db, t, kind, text, exc)
                except DB_ERRORS as exc:
                    detail = describe(exc)
                    return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, None, detail)
                outcome = Outcome.WRITTEN if written.changed else Outcome.UNCHANGED
                outcome = Outcome.MERGED if merged else outcome
                if written.content != text:
                    direction = "sandbox->db->sandbox"
                    return await push(
                        t, kind, written, outcome, direction, replacing=text, base=base
                    )
                await record_sync_base(t, kind, agreed_after(t, written, base))
                return t.result(name, SANDBOX_TO_DB, outcome, written.version, base=agreed(written))
            if db is None:  # nothing on either side
                return t.result(name, "none", Outcome.UNCHANGED)
            if isinstance(action, Push):
                outcome = t.scenario.restored if action.restore else Outcome.PUSHED
                return await push(
                    t, kind, db, outcome, replacing=replacing, base=base, check=not unreadable
                )
            if isinstance(action, Preserve):
                return await preserve(t, kind, text or "", db, action.reason)
            # Nothing: note the match (or repair it).
            known_base = usable or fallback
            if not _matches(known_base, db, settles=t.scenario.settles):
                await record_sync_base(t, kind, agreed_after(t, db, known_base))
            return t.result(name, "none", Outcome.UNCHANGED, db.version, base=agreed(db))
        try:
            current = await self.db.get(t.user_id, kind)
        except DB_ERRORS as exc:
            return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, None, describe(exc))
        if current is None:
            return t.result(name, "none", Outcome.CONFLICT, None, "the DB row kept changing")
        return await preserve(t, kind, text or "", current)

    async def provision(self, t: Target, kind: FileKind, file: MemoryFile) -> SyncResult:
        """A new user's DB copy to the sandbox, unless the sandbox copy has content."""

        async def run() -> SyncResult:
            return await self.synced.noted(t, kind, await provision_copy(t, kind, file), None)

        return await locked(t, kind, run)

    async def push_agents(self, t: Target) -> SyncResult:
        """Scenario 5: the platform template overwrites the sandbox's AGENTS.md."""
        direction = "template->sandbox"
        try:
            text = self.templates.agents_md()
        except OSError as exc:
            return t.result(AGENTS_FILE, direction, Outcome.TEMPLATE_MISSING, None, describe(exc))
        try:
            await t.sandbox.write_text(AGENTS_FILE, text)
        except Exception as exc:
            return t.result(AGENTS_FILE, direction, Outcome.SANDBOX_FAILED, None, describe(exc))
        return t.result(AGENTS_FILE, direction, Outcome.PUSHED)

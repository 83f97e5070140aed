"""A tool's edit stored in the DB alone, its sandbox write having failed
(``SyncService.write_without_sandbox``).

The edited text (its sandbox copy, with whatever the DB does not hold yet, plus the edit)
goes through the read-back rule against the same base as a read-back would, so an earlier
edit still waiting in the sandbox is carried into the DB with it instead of being
overwritten there; the base record then says the sandbox holds that carried copy, which
lags behind the DB copy (rule 3) and gets it at the next sync. On a sandbox another open
session shares (``Scenario.shared``) that record keeps every copy the old one named: the
other session's agent may be working from one, and its whole-file write of it is merged
from it (``push.carried``) — against the carried copy alone, the merge took the lines that
copy added after the agent's for lines the agent removed, and stored that. Held under the
sandbox's lock, as every reconcile is (:func:`memstrata.sandbox.reconcile.locked`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from memstrata.errors import InvalidContentError, VersionConflictError
from memstrata.logs import describe
from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.push import carried, read_base, record_sync_base
from memstrata.sandbox.reconcile import (
    AGENT_TO_DB,
    DB_ERRORS,
    MAX_WRITE_ATTEMPTS,
    decide_in_thread,
    locked,
)
from memstrata.sandbox.results import Outcome, SandboxEdit, SyncResult, Target, choose_base
from memstrata.sandbox.rule import Merge, Nothing, Push, SyncBase, WriteBack


async def store_edit(
    db: AsyncStore,
    t: Target,
    kind: FileKind,
    edit: Callable[[str], str],
    edited: SandboxEdit | None,
    fallback: SyncBase | None,
) -> SyncResult:
    """A tool's edit stored in the DB alone, its sandbox write having failed.

    ``edited`` (the tool's sandbox copy and its edit of it) goes through the rule as a
    read-back would: written when the DB has not moved since the base, merged when it
    has. The sandbox copy may hold an earlier edit the DB lacks (its sync failed), which
    is so stored with this one. When the copy holds nothing the DB lacks (it equals the
    DB copy or lags behind it), there is no copy (``edited`` is ``None``), the merge
    conflicts or the races keep being lost, ``edit`` is applied to the DB copy instead:
    this edit is stored either way, and a conflicting copy stays for the read-back to
    settle. The result's ``base`` is what the sandbox copy is compared with from now on,
    when that is known. Exceptions raised by ``edit`` propagate.
    """

    async def store() -> SyncResult:
        copy_base: SyncBase | None = None
        if edited is not None:
            outcome = await _carry(db, t, kind, edited, fallback)
            if isinstance(outcome, SyncResult):
                return outcome
            copy_base = outcome
        return replace(await edit_db(db, t, kind, edit), base=copy_base)

    async def alone(_: Exception) -> SyncResult:
        # The record cannot be read or written safely unlocked: this edit alone, on
        # the DB copy; the copy's own changes are settled by the next read-back.
        return await edit_db(db, t, kind, edit)

    return await locked(t, kind, store, alone)


async def _carry(
    store: AsyncStore, t: Target, kind: FileKind, edited: SandboxEdit, fallback: SyncBase | None
) -> SyncResult | SyncBase | None:
    """``edited.after`` stored by the rule; else (only ``edit`` is to be stored) the base
    the sandbox copy keeps, if known."""
    name = kind.filename
    record = await read_base(t, kind)
    if t.scenario.shared and record is not None:
        t = replace(t, kept=(*record.older, record.content))
    base = choose_base(record, fallback)
    for _ in range(MAX_WRITE_ATTEMPTS):
        try:
            db = await store.get(t.user_id, kind)
        except DB_ERRORS as exc:
            return t.result(name, AGENT_TO_DB, Outcome.DB_UNAVAILABLE, None, describe(exc))
        # What the rule makes of the copy itself: in line with the DB or behind it, it
        # has nothing of its own to carry (and carrying a copy equal to the DB against
        # a stale base would merge the DB's last change twice and conflict for nothing).
        copy = await decide_in_thread(edited.before, db, base)
        if isinstance(copy, Nothing) and db is not None:
            return carried(t, db.version, edited.before, base)
        if isinstance(copy, Push):
            # The copy lags: compared with what it holds, also when that is the copy a
            # push recorded ahead of a failed write replaced (the record may be unread).
            if base is not None and edited.before in base.older:
                return carried(t, base.version, edited.before, base)
            return base
        action = await decide_in_thread(edited.after, db, base)
        if isinstance(action, Nothing) and db is not None:
            # The DB holds the edited text already (a retried call): applying ``edit``
            # again would add its entry twice.
            written, outcome = db, Outcome.UNCHANGED
        elif isinstance(action, WriteBack | Merge):
            try:
                written = await store.upsert(
                    t.user_id, kind, action.content, action.expected, skip_unchanged=True
                )
            except VersionConflictError:
                continue
            except InvalidContentError:
                return None  # the DB refuses the copy: this edit alone; read-back rejects it
            except DB_ERRORS as exc:
                detail = describe(exc)
                return t.result(name, AGENT_TO_DB, Outcome.DB_UNAVAILABLE, None, detail)
            changed = Outcome.WRITTEN if written.changed else Outcome.UNCHANGED
            outcome = Outcome.MERGED if isinstance(action, Merge) else changed
        else:
            return None  # conflicting: the read-back settles the copy later
        # The sandbox still holds ``before``, now inside the DB copy: compared with this
        # base it lags (rule 3) and gets the DB copy, instead of clashing with it. On a
        # shared sandbox the record keeps the copies it named: another session's agent
        # may be working from one (``push.carried``).
        held = carried(t, written.version, edited.before, base)
        await record_sync_base(t, kind, held)
        return t.result(name, AGENT_TO_DB, outcome, written.version, base=held)
    return None  # the races kept being lost: this edit alone, on the newest DB copy


async def edit_db(
    db: AsyncStore, t: Target, kind: FileKind, edit: Callable[[str], str]
) -> SyncResult:
    """``edit`` applied to the DB copy alone; exceptions raised by ``edit`` propagate."""
    name = kind.filename
    try:
        written = await db.edit(t.user_id, kind, edit, attempts=MAX_WRITE_ATTEMPTS)
    except VersionConflictError:
        return t.result(name, AGENT_TO_DB, Outcome.CONFLICT, None, "kept changing")
    except DB_ERRORS as exc:
        return t.result(name, AGENT_TO_DB, Outcome.DB_UNAVAILABLE, None, describe(exc))
    outcome = Outcome.WRITTEN if written.changed else Outcome.UNCHANGED
    return t.result(name, AGENT_TO_DB, outcome, written.version)

"""The sandbox side of a sync: the base record, a DB copy pushed over the sandbox's, and
the sandbox's copy kept aside first when the DB copy wins over it or the DB refuses it.

Used by :class:`~memstrata.sandbox.reconcile.Reconciler`; failures here are results or
warnings under ``memstrata.sandbox.sync``, as the reconciler's are.

A push records its base *before* writing the file, with the copy it replaces among the
record's ``older`` copies, and writes no file whose record it could not write: a file
memstrata wrote is never left without a record saying so (else, with no base, the rule
would take that stale copy for an agent edit and write it over a newer DB version). If
the file write then fails, the sandbox still holds a copy the record names, which the rule
reads as lagging. Once it lands, the replaced copy stays: the agent may still be working
from the copy it read before the push, and a whole-file write of that copy is then merged
from it (``rule.edited_from``) instead of reverting what the push brought.

The ``older`` copies are every copy memstrata wrote to the file since the sandbox's last
write-back (:func:`records`): a push over a copy an earlier push wrote keeps that push's
copies and adds its own, so an agent that read any of them — the first push's, or the
middle one of three — and writes it back whole undoes none of the later pushes. They go
when the sandbox's next write-back records a new base, or when a controlled write's sync
finds the copy equal to the DB (``Scenario.settles``: a memory tool reads the copy right
then); a push over a copy the caller settled (an agent edit stored, merged, kept aside or
refused) starts again from that copy — unless another open session shares the sandbox
(``Scenario.shared``): its agent may have read any of them, so nothing settles them, and a
write-back or a settled copy adds to them. At most :data:`MAX_OLDER_COPIES` are kept, the
newest: a whole-file write composed from a copy older than all of them is merged from the
oldest one kept, so the changes pushed between the two look like the agent's undoing and
may be undone (or the write conflicts and is kept aside). Until the push's file write
lands the record also names the copy the file holds if the bound dropped it; the record
written once it lands does not (:func:`records`; if that second write fails, the extra
copy it names is harmless).

Right before writing the file, a push reads it again: a file changed since it was read (a
shell ``echo >>``, an unguarded tool, the DB write and embedding in between) is not written
over but raises :class:`Moved`, and the caller decides the file again.

A sandbox copy that loses to the DB copy (:func:`preserve`) or that the DB refuses
(:func:`reject`) is kept aside under ``.memstrata/`` (:mod:`memstrata.sandbox.state`)
before the DB copy is pushed over it; one that cannot be kept aside is not pushed over.
"""

from __future__ import annotations

import logging

from memstrata.errors import ContentTooLargeError, InvalidContentError, SandboxEncodingError
from memstrata.logs import describe, log_failure
from memstrata.memory.async_store import AsyncStore
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.sandbox import state
from memstrata.sandbox.results import Outcome, SyncResult, Target
from memstrata.sandbox.rule import SyncBase, has_content

logger = logging.getLogger("memstrata.sandbox.sync")

DB_TO_SANDBOX = "db->sandbox"


# The copies a base record keeps besides its own (module doc). Each is a whole memory file
# (a few KB, at most the store's MAX_CONTENT_BYTES), written with every push: eight cover
# a burst of page saves while the agent writes nothing back, and keep a record of 4 KB
# files near 36 KB (64 KB files: 585 KB, written and read in about 2 ms).
MAX_OLDER_COPIES = 8


def agreed(file: MemoryFile) -> SyncBase:
    return SyncBase(file.version, file.content)


def agreed_after(t: Target, file: MemoryFile, base: SyncBase | None) -> SyncBase:
    """The base record a write-back of ``file`` leaves: the copy both hold — with every
    copy the record and ``base`` named when another open session shares the sandbox
    (``Target.kept``, module doc)."""
    return carried(t, file.version, file.content, base)


def carried(t: Target, version: int, copy: str, base: SyncBase | None) -> SyncBase:
    """The base of a sandbox holding ``copy``, in the DB at ``version`` (a write-back, or a
    DB-only store that carried it, ``db_only.store_edit``): with every copy the record
    and ``base`` named while another open session shares the sandbox, whose agent may
    have read any of them."""
    if not t.scenario.shared:
        return SyncBase(version, copy)
    copies = (*t.kept, *(() if base is None else _copies(base)))
    return SyncBase(version, copy, _newest_distinct(copies, copy))


def records(
    file: MemoryFile,
    replacing: str | None,
    base: SyncBase | None,
    kept: tuple[str, ...] | None = None,
) -> tuple[SyncBase, SyncBase]:
    """The base records of a push of ``file`` over ``replacing`` under ``base``: the one
    written before the file, naming every copy the file may hold if its write does not
    land, and the one it leaves once it has (module doc). ``kept``: another open session
    shares the sandbox, and these copies (the record's) are never forgotten: a copy the
    caller settled adds to them and to ``base``'s."""
    held = replacing if has_content(replacing) else None
    copies = () if base is None else _copies(base)
    if kept is not None:
        written: tuple[str, ...] = (*kept, *copies, *(() if held is None else (held,)))
    elif held is None or held in copies:
        # No write-back since the base: every copy memstrata wrote to the file since.
        written = copies
    else:  # the caller settled the file's copy
        written = (held,)
    older = _newest_distinct(written, file.content)
    landed = SyncBase(file.version, file.content, older)
    if held is None or held == file.content or held in older:
        return landed, landed
    return SyncBase(file.version, file.content, (held, *older)), landed


def _copies(base: SyncBase) -> tuple[str, ...]:
    return (*base.older, base.content)


def _newest_distinct(copies: tuple[str, ...], current: str) -> tuple[str, ...]:
    """The newest :data:`MAX_OLDER_COPIES` distinct ``copies`` but ``current``, each at its
    latest place, oldest first."""
    kept: list[str] = []
    for copy in reversed(copies):
        if copy != current and copy not in kept:
            kept.append(copy)
    return tuple(reversed(kept[:MAX_OLDER_COPIES]))


class Moved(Exception):
    """The sandbox file changed after the sync read it: not written over, decided again."""


async def push(
    t: Target,
    kind: FileKind,
    file: MemoryFile,
    outcome: Outcome,
    direction: str = DB_TO_SANDBOX,
    detail: str | None = None,
    *,
    replacing: str | None,
    base: SyncBase | None = None,
    check: bool = True,
) -> SyncResult:
    """``file`` written to the sandbox over ``replacing`` (the copy it holds, which the
    caller has settled: in the DB, kept aside, or to be replaced), its base recorded
    first (module doc). No record, no file: the sandbox keeps its copy and its record.
    ``base``: the base in force, whose copies are kept when the file's copy is one of
    them. ``check``: ``replacing`` is what the file held when read; a file
    that no longer holds it raises :class:`Moved` instead of being written over."""
    name, synced = kind.filename, agreed(file)
    ahead, landed = records(file, replacing, base, t.kept if t.scenario.shared else None)
    try:
        await state.write_base(t.sandbox, name, ahead)
    except Exception as exc:
        log_failure(logger, "sync.base_not_recorded", exc, user_id=t.user_id, file=name)
        detail = f"{detail or outcome.value}; push failed: {describe(exc)}"
        return t.result(name, direction, Outcome.SANDBOX_FAILED, file.version, detail)
    if check:
        await _still_holds(t, name, replacing)
    try:
        await t.sandbox.write_text(name, file.content)
    except Exception as exc:
        detail = f"{detail or outcome.value}; push failed: {describe(exc)}"
        return t.result(name, direction, Outcome.SANDBOX_FAILED, file.version, detail)
    if landed != ahead:
        await record_sync_base(t, kind, landed)
    return t.result(name, direction, outcome, file.version, detail, base=synced)


async def provision_copy(t: Target, kind: FileKind, file: MemoryFile) -> SyncResult:
    """A new user's DB copy ``file`` pushed to the sandbox, unless the sandbox copy has
    content: that copy is kept for the next session start to reconcile (``kept``), as is
    one written meanwhile."""
    name = kind.filename
    try:
        text = await t.sandbox.read_text(name)
    except Exception as exc:
        return t.result(name, DB_TO_SANDBOX, Outcome.SANDBOX_FAILED, None, describe(exc))
    if text == file.content:
        await record_base(t, kind, file)
        return t.result(name, "none", Outcome.UNCHANGED, file.version, base=agreed(file))
    if has_content(text):
        return t.result(name, "none", Outcome.KEPT, file.version)
    try:
        return await push(t, kind, file, Outcome.PUSHED, replacing=text)
    except Moved:  # written meanwhile
        return t.result(name, "none", Outcome.KEPT, file.version)


async def _still_holds(t: Target, name: str, read: str | None) -> None:
    """Raise :class:`Moved` if the file no longer holds ``read``. A file that cannot be
    read now is left to the write, which reports the failure; one that is no longer
    text changed."""
    try:
        now = await t.sandbox.read_text(name)
    except SandboxEncodingError:
        raise Moved from None
    except Exception:
        return
    if now != read:
        raise Moved


async def preserve(
    t: Target, kind: FileKind, agent_text: str, winner: MemoryFile, reason: str | None = None
) -> SyncResult:
    """The DB copy (a human's edit) wins; the agent's copy is kept beside it. ``reason``:
    why, when it is not that both edited the same lines (``rule.Preserve``)."""
    try:
        path = await state.preserve_copy(t.sandbox, kind.filename, agent_text)
    except Exception as exc:
        # Without a preserved copy, overwriting would lose the agent's edit: leave it.
        detail = f"agent copy could not be preserved ({describe(exc)}); left in the sandbox"
        return t.result(
            kind.filename, "none", Outcome.CONFLICT, winner.version, detail, unresolved=True
        )
    detail = f"the DB copy won; the agent's copy was saved to {path}"
    detail = detail if reason is None else f"{reason}: {detail}"
    return await push(t, kind, winner, Outcome.CONFLICT, detail=detail, replacing=agent_text)


async def reject(
    db: AsyncStore,
    t: Target,
    kind: FileKind,
    agent_text: str,
    error: InvalidContentError | SandboxEncodingError,
) -> SyncResult:
    """The DB refuses the content: keep the sandbox copy aside, restore the DB copy. A
    merge too large for a copy within the limit is no refusal of the copy: the DB copy
    wins over it, as in a conflict, saying why (:func:`merge_too_large`)."""
    try:
        current = await db.get(t.user_id, kind)
    except Exception as exc:
        return t.result(kind.filename, "none", Outcome.REJECTED, None, f"{error}; {describe(exc)}")
    too_large = None if current is None else merge_too_large(agent_text, error)
    if current is not None and too_large is not None:
        return await preserve(t, kind, agent_text, current, too_large)  # may raise Moved
    try:
        path = await state.preserve_copy(t.sandbox, kind.filename, agent_text, rejected=True)
    except Exception as exc:
        detail = f"{error}; {describe(exc)}"
        return t.result(kind.filename, "none", Outcome.REJECTED, None, detail)
    detail = f"{error}; the sandbox copy was saved to {path}"
    if current is None:
        return t.result(kind.filename, "none", Outcome.REJECTED, None, detail)
    # Not checked again: the copy kept aside is the file's bytes, not text to compare.
    return await push(
        t, kind, current, Outcome.REJECTED, detail=detail, replacing=agent_text, check=False
    )


def merge_too_large(agent_text: str, error: Exception) -> str | None:
    """Why the DB copy wins when ``error`` refused the merge of ``agent_text`` with it, not
    the copy itself (which is within the limit: kept aside as ``rejected``, it would read
    as a copy too large to store); None for any other refusal."""
    if not isinstance(error, ContentTooLargeError):
        return None
    own = len(agent_text.encode("utf-8", "surrogatepass"))
    if own > error.limit:
        return None
    return (
        f"merged with the DB copy it would be {error.size:,} bytes, over the limit of "
        f"{error.limit:,} bytes (the agent's copy alone is {own:,} bytes, within it)"
    )


async def read_base(t: Target, kind: FileKind) -> SyncBase | None:
    try:
        return await state.read_base(t.sandbox, kind.filename)
    except Exception:
        return None  # an unreadable record only costs precision: callers fall back


async def record_base(t: Target, kind: FileKind, file: MemoryFile) -> None:
    await record_sync_base(t, kind, agreed(file))


async def record_sync_base(t: Target, kind: FileKind, base: SyncBase) -> None:
    try:
        await state.write_base(t.sandbox, kind.filename, base)
    except Exception as exc:
        log_failure(logger, "sync.base_not_recorded", exc, user_id=t.user_id, file=kind.filename)

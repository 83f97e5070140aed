"""The per-file sync rule engine behind :class:`~memstrata.sandbox.sync.SyncService`.

Read-back rule (:meth:`Reconciler.reconcile`, shared by agent writes, round ends and
session starts). The *base* is the DB copy the sandbox file last matched: its
``.memstrata/base`` record (:mod:`memstrata.sandbox.state`), else the round tracker's
round-start snapshot, else none.

1. sandbox file missing or blank → the DB copy is pushed; a sandbox never deletes or
   empties a DB row;
2. sandbox equals the DB → nothing to write;
3. sandbox equals its base → the sandbox merely lags (a push failed, another process
   wrote the DB): the DB copy is pushed;
4. otherwise the sandbox holds an agent edit. It is written with ``expected_version`` =
   the base version (no base: the current version, the spec's plain sandbox-first rule).
   On a version conflict it is merged line by line with the newer DB copy
   (:func:`~memstrata.sandbox.merge.merge3`, base = the base content); a clean merge is
   written and pushed, otherwise the DB copy (a human's edit) wins, the agent's copy is
   kept as ``.memstrata/conflicts/<FILE>.<timestamp>.md`` and a warning is logged.

Every file handled yields one :class:`SyncResult` and one ``sync.file`` log event with
the scenario, direction and result (spec 6). Sandbox failures of any kind become results
(spec 5); an unreachable DB during a read-back becomes ``db_unavailable`` and leaves the
sandbox untouched.
"""

from __future__ import annotations

import builtins
import logging
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial

import anyio.to_thread
from sqlalchemy.exc import SQLAlchemyError

from memstrata.errors import DatabaseSetupError, InvalidContentError, VersionConflictError
from memstrata.logs import log_event
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox import state
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.dirty import SyncBase
from memstrata.sandbox.merge import merge3

logger = logging.getLogger("memstrata.sandbox.sync")

# What "the database is unreachable" looks like from the store.
DB_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, DatabaseSetupError)
# A write-back that keeps losing races against other writers gives up and lets the DB win.
MAX_WRITE_ATTEMPTS = 3
AGENTS_FILE = FileKind.AGENTS.filename
SANDBOX_TO_DB = "sandbox->db"
DB_TO_SANDBOX = "db->sandbox"


class Outcome(StrEnum):
    WRITTEN = "written"  # sandbox edit stored in the DB
    MERGED = "merged"  # edit merged with a concurrent DB edit, stored and pushed
    UNCHANGED = "unchanged"  # sandbox and DB already agree
    PUSHED = "pushed"  # DB (or template) copy written to the sandbox
    RESTORED = "restored"  # sandbox file was missing or blank; DB copy pushed again
    KEPT = "kept"  # provisioning left an existing sandbox copy for the next session start
    CONFLICT = "conflict"  # DB copy won; agent copy preserved under .memstrata/conflicts
    REJECTED = "rejected"  # DB refused the sandbox content (too large, NUL); copy preserved
    DB_UNAVAILABLE = "db_unavailable"  # sandbox left as is; retried later
    SANDBOX_FAILED = "sandbox_failed"  # sandbox I/O failed; the DB is not rolled back
    TEMPLATE_MISSING = "template_missing"  # the AGENTS.md template cannot be read


RETRY_OUTCOMES = frozenset({Outcome.DB_UNAVAILABLE, Outcome.SANDBOX_FAILED})
WARNING_OUTCOMES = RETRY_OUTCOMES | {Outcome.CONFLICT, Outcome.REJECTED, Outcome.TEMPLATE_MISSING}


@dataclass(frozen=True)
class SyncResult:
    filename: str
    direction: str  # "sandbox->db", "db->sandbox", "template->sandbox", "frontend->db", "none"
    outcome: Outcome
    version: int | None = None  # the DB version the file ended at, when known
    detail: str | None = None

    @property
    def needs_retry(self) -> bool:
        return self.outcome in RETRY_OUTCOMES


@dataclass(frozen=True)
class Target:
    """One sandbox being synced for one user, and the scenario doing it (for the logs)."""

    user_id: str
    session_id: str | None
    sandbox: Sandbox
    scenario: str

    def result(
        self,
        filename: str,
        direction: str,
        outcome: Outcome,
        version: int | None = None,
        detail: str | None = None,
    ) -> SyncResult:
        """Build a result and log it: warnings for failures and conflicts."""
        result = SyncResult(filename, direction, outcome, version, detail)
        log_result(self.user_id, self.session_id, self.scenario, result)
        return result


def log_result(user_id: str, session_id: str | None, scenario: str, result: SyncResult) -> None:
    level = logging.WARNING if result.outcome in WARNING_OUTCOMES else logging.INFO
    log_event(
        logger,
        "sync.file",
        level,
        user_id=user_id,
        session_id=session_id,
        scenario=scenario,
        file=result.filename,
        direction=result.direction,
        result=result.outcome.value,
        version=result.version,
        detail=result.detail,
    )


def has_content(text: str | None) -> bool:
    return text is not None and text.strip() != ""


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Reconciler:
    """DB and sandbox primitives plus the read-back rule (module doc)."""

    def __init__(self, store: MemoryStore, templates: TemplateSet) -> None:
        self.store = store
        self.templates = templates

    async def reconcile(self, t: Target, kind: FileKind, fallback: SyncBase | None) -> SyncResult:
        name = kind.filename
        try:
            text = await t.sandbox.read_text(name)
        except Exception as exc:
            return t.result(name, SANDBOX_TO_DB, Outcome.SANDBOX_FAILED, detail=describe(exc))
        try:
            current = await self.get(t.user_id, kind)
        except DB_ERRORS as exc:
            return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, detail=describe(exc))
        if text is None or not has_content(text):
            if current is None:
                return t.result(name, "none", Outcome.UNCHANGED)
            outcome = Outcome.PUSHED if t.scenario == "session" else Outcome.RESTORED
            return await self.push(t, kind, current, outcome)
        if current is None:
            return await self.write_back(t, kind, text, text, 0, None)
        base = await self.read_base(t, kind) or fallback
        if text == current.content:
            if base != SyncBase(current.version, current.content):
                await self.record_base(t, kind, current)
            return t.result(name, "none", Outcome.UNCHANGED, current.version)
        if base is not None and text == base.content:
            return await self.push(t, kind, current, Outcome.PUSHED)
        if base is None:
            return await self.write_back(t, kind, text, text, current.version, None)
        return await self.write_back(t, kind, text, text, base.version, base.content)

    async def write_back(
        self,
        t: Target,
        kind: FileKind,
        content: str,
        sandbox_text: str,
        expected: int,
        base_content: str | None,
        *,
        merged: bool = False,
    ) -> SyncResult:
        """Store ``content`` at ``expected``, merging with newer DB copies on conflicts.

        ``sandbox_text`` is what the sandbox holds now: preserved on a lost conflict, and
        replaced by the stored text when they differ.
        """
        name = kind.filename
        for _ in range(MAX_WRITE_ATTEMPTS):
            try:
                written = await self.upsert(t.user_id, kind, content, expected)
            except VersionConflictError:
                try:
                    current = await self.get(t.user_id, kind)
                except DB_ERRORS as exc:
                    return t.result(
                        name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, None, describe(exc)
                    )
                if current is None:  # the row vanished: insert it again
                    expected, base_content = 0, None
                    continue
                if current.content != content:
                    again = (
                        None
                        if base_content is None
                        else merge3(base_content, content, current.content)
                    )
                    if again is None:
                        return await self.lose_conflict(t, kind, sandbox_text, current)
                    content, expected, base_content = again, current.version, current.content
                    merged = True
                    continue
                written = replace(current, changed=False)  # someone stored exactly this
            except InvalidContentError as exc:
                return await self.reject(t, kind, sandbox_text, exc)
            except DB_ERRORS as exc:
                return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, None, describe(exc))
            outcome = Outcome.WRITTEN if written.changed else Outcome.UNCHANGED
            outcome = Outcome.MERGED if merged else outcome
            if written.content != sandbox_text:
                return await self.push(t, kind, written, outcome, "sandbox->db->sandbox")
            await self.record_base(t, kind, written)
            return t.result(name, SANDBOX_TO_DB, outcome, written.version)
        try:
            current = await self.get(t.user_id, kind)
        except DB_ERRORS as exc:
            return t.result(name, SANDBOX_TO_DB, Outcome.DB_UNAVAILABLE, None, describe(exc))
        if current is None:
            return t.result(name, "none", Outcome.CONFLICT, None, "the DB row kept changing")
        return await self.lose_conflict(t, kind, sandbox_text, current)

    async def lose_conflict(
        self, t: Target, kind: FileKind, agent_text: str, winner: MemoryFile
    ) -> SyncResult:
        """The DB copy (a human's edit) wins; the agent's copy is kept beside it."""
        try:
            path = await state.preserve_copy(t.sandbox, kind.filename, agent_text)
        except Exception as exc:
            # Without a preserved copy, overwriting would lose the agent's edit: leave it.
            detail = f"agent copy could not be preserved ({describe(exc)}); left in the sandbox"
            return t.result(kind.filename, "none", Outcome.CONFLICT, winner.version, detail)
        detail = f"the DB copy won; the agent's copy was saved to {path}"
        return await self.push(t, kind, winner, Outcome.CONFLICT, detail=detail)

    async def reject(
        self, t: Target, kind: FileKind, agent_text: str, error: InvalidContentError
    ) -> SyncResult:
        """The DB refuses the content: keep the sandbox copy aside, restore the DB copy."""
        try:
            current = await self.get(t.user_id, kind)
            path = await state.preserve_copy(t.sandbox, kind.filename, agent_text, rejected=True)
        except Exception as exc:
            detail = f"{error}; {describe(exc)}"
            return t.result(kind.filename, "none", Outcome.REJECTED, None, detail)
        detail = f"{error}; the sandbox copy was saved to {path}"
        if current is None:
            return t.result(kind.filename, "none", Outcome.REJECTED, None, detail)
        return await self.push(t, kind, current, Outcome.REJECTED, detail=detail)

    async def push_frontend(
        self, t: Target, kind: FileKind, file: MemoryFile, previous: MemoryFile | None
    ) -> SyncResult:
        """Force-push a frontend edit without erasing an agent edit not yet read back."""
        try:
            text = await t.sandbox.read_text(kind.filename)
        except Exception:
            text = None  # unreadable: nothing to protect; the push reports any failure
        base = await self.read_base(t, kind)
        if base is None and previous is not None:
            base = SyncBase(previous.version, previous.content)
        if text is None or not has_content(text) or text == file.content or base is None:
            return await self.push(t, kind, file, Outcome.PUSHED)
        if text == base.content:
            return await self.push(t, kind, file, Outcome.PUSHED)
        merged = merge3(base.content, text, file.content)
        if merged is None:
            return await self.lose_conflict(t, kind, text, file)
        return await self.write_back(t, kind, merged, text, file.version, file.content, merged=True)

    # -- sandbox side ----------------------------------------------------------------------

    async def push(
        self,
        t: Target,
        kind: FileKind,
        file: MemoryFile,
        outcome: Outcome,
        direction: str = DB_TO_SANDBOX,
        detail: str | None = None,
    ) -> SyncResult:
        try:
            await t.sandbox.write_text(kind.filename, file.content)
        except Exception as exc:
            detail = f"{detail or outcome.value}; push failed: {describe(exc)}"
            return t.result(kind.filename, direction, Outcome.SANDBOX_FAILED, file.version, detail)
        await self.record_base(t, kind, file)
        return t.result(kind.filename, direction, outcome, file.version, detail)

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

    async def read_base(self, t: Target, kind: FileKind) -> SyncBase | None:
        try:
            return await state.read_base(t.sandbox, kind.filename)
        except Exception:
            return None  # an unreadable record only costs precision: callers fall back

    async def record_base(self, t: Target, kind: FileKind, file: MemoryFile) -> None:
        try:
            await state.write_base(t.sandbox, kind.filename, SyncBase(file.version, file.content))
        except Exception as exc:
            log_event(
                logger,
                "sync.base_not_recorded",
                logging.WARNING,
                user_id=t.user_id,
                file=kind.filename,
                error=describe(exc),
            )

    # -- DB side -----------------------------------------------------------------------------

    async def get(self, user_id: str, kind: FileKind) -> MemoryFile | None:
        return await anyio.to_thread.run_sync(self.store.get_memory_file, user_id, kind)

    async def upsert(
        self, user_id: str, kind: FileKind, content: str, expected: int | None, skip: bool = True
    ) -> MemoryFile:
        write = partial(
            self.store.upsert_memory_file, user_id, kind, content, expected, skip_unchanged=skip
        )
        return await anyio.to_thread.run_sync(write)


class BrokenSandbox:
    """Stands in when the provider itself failed, so every operation reports that failure."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    async def read_text(self, path: str) -> str | None:
        raise self._error

    async def write_text(self, path: str, content: str) -> None:
        raise self._error

    async def exists(self, path: str) -> bool:
        raise self._error

    async def list(self, prefix: str = "") -> builtins.list[str]:
        raise self._error

    async def delete(self, path: str) -> None:
        raise self._error

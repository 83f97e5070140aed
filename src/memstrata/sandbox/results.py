"""What a sync yields and who asks for it: the pure types around the read-back executor.

:class:`Outcome` and its warning and retry sets, :class:`SyncResult` (one per file
handled) and :func:`log_result` (its ``sync.file`` event), the :class:`Scenario` labels
(``PROVISION``, ``AGENT_WRITE``, ``ROUND_END``, ``SESSION``, ``SESSION_END``,
``FRONTEND``), the
:class:`Target` a sync runs against, a tool's :class:`SandboxEdit`, :func:`choose_base`
(the base record or the caller's fallback), and :func:`open_sandbox` with its failing
stand-in :class:`BrokenSandbox`. :class:`~memstrata.sandbox.reconcile.Reconciler` uses
them; events are logged under ``memstrata.sandbox.sync``, as the reconciler's are.
"""

from __future__ import annotations

import builtins
import logging
from dataclasses import dataclass, replace
from enum import StrEnum

from memstrata.logs import log_event, log_failure
from memstrata.sandbox.base import Sandbox, SandboxProvider
from memstrata.sandbox.dirty import EditedBase, SeenBase
from memstrata.sandbox.rule import SyncBase

logger = logging.getLogger("memstrata.sandbox.sync")


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
    ERASED = "erased"  # the user was erased since the round began: the file is gone, none read
    TEMPLATE_MISSING = "template_missing"  # the AGENTS.md template cannot be read


RETRY_OUTCOMES = frozenset({Outcome.DB_UNAVAILABLE, Outcome.SANDBOX_FAILED})
WARNING_OUTCOMES = RETRY_OUTCOMES | {Outcome.CONFLICT, Outcome.REJECTED, Outcome.TEMPLATE_MISSING}


@dataclass(frozen=True)
class Scenario:
    """Who is syncing: the log label, and how the rule's choices are reported."""

    name: str
    restored: Outcome  # a blank sandbox copy replaced: "restored" after edits, else "pushed"
    db_authoritative: bool = False  # a frontend edit: the DB copy is forced onto the sandbox
    # A controlled write's sync (a memory tool reads the copy right then): a copy equal to
    # the DB is the agent's own, and the copies pushes replaced (``older``) are forgotten.
    settles: bool = False
    # Another open session shares the sandbox (``sharing``): its agent may have read any
    # copy the record names, so none is forgotten — a write-back or a push over a settled
    # copy adds to them (``push.records``).
    shared: bool = False


PROVISION = Scenario("provision", Outcome.PUSHED)
AGENT_WRITE = Scenario("agent_write", Outcome.RESTORED, settles=True)
ROUND_END = Scenario("round_end", Outcome.RESTORED)
# A session start settles too: its agent reads the copy the start leaves, after any push.
SESSION = Scenario("session", Outcome.PUSHED, settles=True)
SESSION_END = Scenario("session_end", Outcome.RESTORED)
FRONTEND = Scenario("frontend", Outcome.PUSHED, db_authoritative=True)


def sharing(scenario: Scenario) -> Scenario:
    """``scenario`` on a sandbox another open session holds
    (``sessions.ReadBackMarks.another_holds``): it settles nothing and forgets no copy."""
    return replace(scenario, settles=False, shared=True)


@dataclass(frozen=True)
class SyncResult:
    filename: str
    direction: str  # "sandbox->db", "db->sandbox", "template->sandbox", "frontend->db", "none"
    outcome: Outcome
    version: int | None = None  # the DB version the file ended at, when known
    detail: str | None = None
    # Left undecided (a conflict whose agent copy could not be kept aside): the file stays
    # dirty with its old base, or the next read-back would take the agent's copy for a
    # fresh edit on top of the human's and write it over theirs.
    unresolved: bool = False
    # What the sandbox copy is to be compared with from now on, when this sync settled it:
    # the DB copy both now hold, or (``store_edit``) the sandbox text and the DB version
    # that holds it. A tool keeps it in its round tracker, because the base record may not
    # have been written.
    base: SyncBase | None = None
    # Set on a session start's results that read back an earlier session of the user's,
    # closed since (``SyncService.start_session``): that session's id, for the host to
    # tell the user that its edit was kept aside or stored.
    closed_session: str | None = None

    @property
    def needs_retry(self) -> bool:
        return self.unresolved or self.outcome in RETRY_OUTCOMES


@dataclass(frozen=True)
class Target:
    """One sandbox being synced for one user, and the scenario doing it."""

    user_id: str
    session_id: str | None
    sandbox: Sandbox
    scenario: Scenario
    # A ``shared`` scenario's copies that no record may forget: every copy the sandbox's
    # base record named when the sync read it (``push.records``).
    kept: tuple[str, ...] = ()

    def result(
        self,
        filename: str,
        direction: str,
        outcome: Outcome,
        version: int | None = None,
        detail: str | None = None,
        *,
        unresolved: bool = False,
        base: SyncBase | None = None,
    ) -> SyncResult:
        """Build a result and log it: warnings for failures and conflicts."""
        result = SyncResult(filename, direction, outcome, version, detail, unresolved, base)
        log_result(self.user_id, self.session_id, self.scenario.name, result)
        return result


def gone(t: Target, base: SyncBase | None, result: SyncResult) -> SyncResult:
    """``result`` of a read-back, or :attr:`Outcome.ERASED` when it found the file on
    neither side although the round began with it (``base``): only erasing the user
    deletes a stored file, so "unchanged" would hide that it is gone."""
    nothing = (result.outcome, result.direction, result.version) == (
        Outcome.UNCHANGED,
        "none",
        None,
    )
    if base is None or not nothing:
        return result
    detail = "the user was erased since the round began: nothing read back"
    return t.result(result.filename, "none", Outcome.ERASED, None, detail)


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


@dataclass(frozen=True)
class SandboxEdit:
    """A tool's edit of its sandbox copy: the text it read there and the text it made."""

    before: str
    after: str


def choose_base(record: SyncBase | None, fallback: SyncBase | None) -> SyncBase | None:
    """The base record, else ``fallback`` — or a :class:`SeenBase` at least as new as the
    record: the sandbox's own session saw its copy reach that base, after the record was
    written or while writing it failed (a record at the same version may be an older
    statement about it: a carried copy, ``store_edit``).

    A seen base that is the record's own base keeps the record's ``older`` copies — but
    an :class:`EditedBase`, the copy a memory tool just edited: its write is from that copy
    alone (a record another open session shares keeps copies that session read).

    Only a seen base may override the record: the round-start snapshot is the DB copy, not
    what the sandbox holds, and preferring a newer one would write a lagging sandbox copy
    back over it.
    """
    if isinstance(fallback, SeenBase) and (record is None or fallback.version >= record.version):
        if isinstance(fallback, EditedBase):
            return fallback  # a memory tool's own edit of exactly this copy
        if record is not None and (record.version, record.content) == (
            fallback.version,
            fallback.content,
        ):
            # The same base, and the record may know the copy its push replaced.
            return replace(fallback, older=record.older)
        return fallback
    return record or fallback


def open_sandbox(provider: SandboxProvider, user_id: str, session_id: str | None) -> Sandbox:
    """``provider.for_user``, or a :class:`BrokenSandbox` carrying its exception: a provider
    that fails then takes the failing sandbox's paths (a warning, the DB fallback) instead
    of raising into the sync scenario, the agent session or the MCP tool that asked."""
    try:
        return provider.for_user(user_id, session_id)
    except Exception as exc:
        log_failure(logger, "sync.sandbox_unavailable", exc, user_id=user_id, session_id=session_id)
        return BrokenSandbox(exc)


class BrokenSandbox:
    """Stands in when the provider itself failed, so every operation reports that failure."""

    case_sensitive = False

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

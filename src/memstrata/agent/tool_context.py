"""What the memory tools of one session are bound to (:class:`ToolContext`): the user, the
sync service, the sandbox, the round's tracker — and the one step every controlled write
ends with, syncing the file it wrote and telling the tracker where that left it."""

from __future__ import annotations

from dataclasses import dataclass

from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.dirty import RoundTracker
from memstrata.sandbox.results import Outcome, SyncResult
from memstrata.sandbox.sync import SyncService

# A controlled write that left the DB equal to the sandbox: no round-end read-back needed.
SYNCED_OUTCOMES = frozenset({Outcome.WRITTEN, Outcome.UNCHANGED, Outcome.MERGED})


@dataclass(frozen=True)
class ToolContext:
    """What every tool of one session is bound to. ``tracker`` is the round's one owner
    of dirty flags and of the sandbox's path rules (case, workspace prefixes)."""

    user_id: str
    sync: SyncService
    sandbox: Sandbox
    session_id: str | None
    tracker: RoundTracker
    # Whether a round end or session start follows that reads the sandbox copy back. MCP
    # clients call tools with no rounds: an edit left in the sandbox copy is stored only
    # by a later call, so the answer must not promise "it will be saved later".
    rounds: bool = True

    @classmethod
    def bind(
        cls,
        user_id: str,
        sync: SyncService,
        sandbox: Sandbox,
        *,
        session_id: str | None = None,
        tracker: RoundTracker | None = None,
        rounds: bool = True,
    ) -> ToolContext:
        """A context; without a ``tracker`` the tools keep their own for this sandbox."""
        if tracker is None:
            tracker = RoundTracker(user_id, session_id, case_sensitive=sandbox.case_sensitive)
        return cls(user_id, sync, sandbox, session_id, tracker, rounds)

    async def sync_written(self, name: str) -> SyncResult:
        """Sync ``name`` after a controlled write to the sandbox (scenario 2) and tell the
        round tracker where that left it: in line with the DB, and on which base."""
        result = await self.sync.after_controlled_write(
            self.user_id, name, self.session_id, sandbox=self.sandbox, tracker=self.tracker
        )
        if result.outcome in SYNCED_OUTCOMES:
            self.tracker.mark_synced(name)
        if result.base is not None:
            self.tracker.advance_base(name, result.base)
        return result

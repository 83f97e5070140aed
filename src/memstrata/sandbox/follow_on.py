"""The follow-on effects of a frontend edit's DB write, in order: mirror, invalidate.

:meth:`SyncService.frontend_edit <memstrata.sandbox.sync.SyncService.frontend_edit>` runs
them once the write is stored (:meth:`~memstrata.sandbox.sync.SyncService.invalidate` also
after an MCP agent's write). Neither can undo the write: each failure is logged under
``memstrata.sandbox.sync`` and the next step still runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

import anyio
import anyio.to_thread

from memstrata.logs import describe, log_event, log_failure
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.sandbox.reconcile import Reconciler
from memstrata.sandbox.results import SyncResult, Target
from memstrata.sandbox.rule import SyncBase

logger = logging.getLogger("memstrata.sandbox.sync")


class CacheInvalidator(Protocol):
    """Drops a user's cached agent state (``memstrata.agent.pool.AgentPool``)."""

    def invalidate(self, user_id: str) -> None: ...


async def mirror(
    files: Reconciler, targets: Iterable[Target], kind: FileKind, previous: MemoryFile | None
) -> list[tuple[Target, SyncResult]]:
    """Follow-on step 1: force-push to the user's sandbox and every session sandbox this
    service started; returns each sandbox's result. An agent edit not yet read back is not
    erased: the rule merges it on top of the new DB copy (stored as the next version) or
    preserves it under ``.memstrata/conflicts``, and the result says so (the caller hands
    it to the sessions on that sandbox, :mod:`memstrata.sandbox.notices`). Policy: a
    sandbox failure is a ``sandbox_failed`` result and a warning; the lagging sandbox is
    refreshed by a later read-back (rule 3). Anything else raised for one sandbox is an
    ERROR (``sync.mirror_failed``, with the traceback) and the write still stands."""
    fallback = None if previous is None else SyncBase(previous.version, previous.content)
    # One sandbox after another, not concurrently: a sandbox holding an agent edit is
    # merged and the merge stored as the next version, which the next sandbox must
    # be reconciled against (two merges at once would race on one version).
    results: list[tuple[Target, SyncResult]] = []
    for t in targets:
        try:
            results.append((t, await files.reconcile(t, kind, fallback)))
        except Exception as exc:
            # A bug, not a sandbox failure (those are results): the write is stored
            # and must be answered as stored, the other sandboxes still mirrored, and
            # the agents still invalidated; a later read-back brings this one up.
            log_event(
                logger,
                "sync.mirror_failed",
                logging.ERROR,
                user_id=t.user_id,
                session_id=t.session_id,
                file=kind.filename,
                error=describe(exc),
                exc_info=exc,
            )
    return results


async def invalidate(pool: CacheInvalidator | None, user_id: str) -> None:
    """Follow-on step 2: drop the user's cached agents here and, through NOTIFY, in
    every process (also after an MCP agent's write). Policy: a failure is a warning
    (``sync.invalidate_failed``)."""
    if pool is None:
        return
    try:
        await anyio.to_thread.run_sync(pool.invalidate, user_id)
    except Exception as exc:
        log_failure(logger, "sync.invalidate_failed", exc, user_id=user_id)

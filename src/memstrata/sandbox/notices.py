"""What a round end reports besides its own read-back: the agent's copies that a frontend
edit's mirror settled in its sandbox meanwhile.

A frontend edit made in the agent session's own process is mirrored into the session's
sandbox at once (:func:`memstrata.sandbox.follow_on.mirror`), and an agent edit not read
back yet is then merged into the DB or kept aside under ``.memstrata/conflicts`` by the
read-back rule, there and then. Made in another process, the same edit reaches the sandbox
only through the session's next round end, whose read-back decides by the same rule and
returns the outcome. So that both orderings report alike, the mirror's result for a copy it
settled (:data:`SETTLED`) is handed to every round tracker watching that sandbox
(:class:`OpenTrackers`, fed by ``SyncService.begin_round``), and the next round end
reports it (:func:`reported`).

Only this process's trackers hear of it: another process's mirror into the user's own
sandbox (``session_id`` ``None``, which every process pushes to) settles an agent's copy
there without a report to a session of this one; its conflict copy is kept all the same.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace

from memstrata.sandbox.dirty import RoundTracker
from memstrata.sandbox.results import Outcome, SyncResult

# Outcomes of a mirror that settled the sandbox's own copy (an agent edit): stored, merged,
# kept aside or refused. A push over a lagging copy, or a failure the round end retries
# itself, is not the session's news.
SETTLED = frozenset({Outcome.WRITTEN, Outcome.MERGED, Outcome.CONFLICT, Outcome.REJECTED})
# Empty entries are dropped once the map has grown this much since the last sweep.
_MIN_SWEEP = 64

_Key = tuple[str, str | None]


def is_settled(result: SyncResult) -> bool:
    """Whether a mirror's ``result`` settled the agent's copy (left nothing to retry)."""
    return result.outcome in SETTLED and not result.needs_retry


class OpenTrackers:
    """The round trackers of this process, by sandbox (user and session id), held weakly:
    a session nothing refers to any more is not kept alive, nor told. Thread-safe."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._trackers: dict[_Key, weakref.WeakSet[RoundTracker]] = {}
        self._sweep_at = _MIN_SWEEP

    def watch(self, tracker: RoundTracker) -> None:
        key = (tracker.user_id, tracker.session_id)
        with self._mutex:
            self._trackers.setdefault(key, weakref.WeakSet()).add(tracker)
            if len(self._trackers) >= self._sweep_at:
                self._trackers = {k: v for k, v in self._trackers.items() if _alive(v)}
                self._sweep_at = max(_MIN_SWEEP, 2 * len(self._trackers))

    def started(self, tracker: RoundTracker | None) -> bool:
        """Whether a sync with ``tracker`` is an open start's own: one without a tracker is
        the session's own; a tracker no start made (``SyncService.begin_round``: an MCP
        call's, a host's own ``ToolContext.bind``) is no open start's."""
        if tracker is None:
            return True
        with self._mutex:
            return tracker in self._trackers.get((tracker.user_id, tracker.session_id), ())

    def tell(self, user_id: str, session_id: str | None, result: SyncResult) -> None:
        """Hand a mirror's ``result`` for this sandbox to its trackers, if it settled the
        agent's copy (:func:`is_settled`)."""
        if not is_settled(result):
            return
        with self._mutex:
            trackers = list(self._trackers.get((user_id, session_id), ()))
        for tracker in trackers:
            tracker.notice(result)


def _alive(trackers: weakref.WeakSet[RoundTracker]) -> bool:
    # Iterating skips the collected: ``len`` may still count one whose removal is pending.
    return next(iter(trackers), None) is not None


def reported(own: Sequence[SyncResult], notices: Sequence[SyncResult]) -> list[SyncResult]:
    """A round end's results: its ``own`` read-back's, with the ``notices`` the mirror left
    (module doc). A file's notices come before its own result, which they replace when the
    read-back found nothing more to do (``unchanged``): the file's outcome this round is
    then the mirror's, at the version the read-back found, as when the round end's own
    read-back settles the copy. Notices of files not read back come last. A notice carries
    no ``base``: where the copy stands now is the read-back's to say."""
    told: dict[str, list[SyncResult]] = {}
    for notice in notices:
        told.setdefault(notice.filename, []).append(replace(notice, base=None))
    results: list[SyncResult] = []
    for result in own:
        earlier = told.pop(result.filename, [])
        if earlier and result.outcome is Outcome.UNCHANGED:
            last = earlier.pop()
            version = last.version if result.version is None else result.version
            results += [*earlier, replace(last, version=version, base=result.base)]
        else:
            results += [*earlier, result]
    for rest in told.values():
        results += rest
    return results

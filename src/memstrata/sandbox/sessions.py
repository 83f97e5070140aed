"""Which session sandboxes of each user a :class:`~memstrata.sandbox.sync.SyncService` has
open, and which closed since the user's last session start.

A frontend edit is pushed to the open ones (``SyncService.open_sessions``); the closed ones
are read back by the user's next session start (``SyncService.end_session``). Updated from
the threads of every loop using the service: each change is made whole under one mutex.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict

# Users whose closed sessions wait for a read-back at their next session start, at most:
# past it the least recently noted are forgotten (their edits stay in the closed session
# directories, as before the read-back existed), so the map cannot grow without bound.
MAX_CLOSED_USERS = 10_000


class SessionRegistry:
    """Open and closed sessions per user (module doc); every method is thread-safe."""

    def __init__(self) -> None:
        # user -> session id -> how many opened sessions use it: a host that reopens a
        # session id keeps it open until the last of them ends. Updated from the threads
        # of every loop using this service: each change is a read-modify-write of both
        # levels, made whole under the mutex.
        self._mutex = threading.Lock()
        self._open: dict[str, Counter[str]] = {}
        # user -> sessions closed since the user's last session start, read back by the
        # next one (``end_session``); under the same mutex.
        # The users least recently noted go first past MAX_CLOSED_USERS: a user who never
        # starts a session again would otherwise be kept for the life of the process.
        self._closed: OrderedDict[str, set[str]] = OrderedDict()

    def began(self, user_id: str, session_id: str) -> None:
        with self._mutex:
            self._open.setdefault(user_id, Counter())[session_id] += 1

    def ended(self, user_id: str, session_id: str) -> None:
        """One start of the session ended: closed (and noted for a read-back) once every
        start of it has ended."""
        with self._mutex:
            sessions = self._open.get(user_id)
            if sessions is None or session_id not in sessions:
                return
            sessions[session_id] -= 1
            if sessions[session_id] <= 0:
                del sessions[session_id]
                self._note_closed(user_id, session_id)
            if not sessions:
                # Under the mutex: a session starting now must not count in a dropped map.
                del self._open[user_id]

    def take_closed(self, user_id: str, starting: str | None) -> list[str]:
        """The sessions of ``user_id`` closed since the last call, forgotten here, but
        ``starting`` and any reopened meanwhile."""
        with self._mutex:
            # One reopened meanwhile is read back by its own round ends and close.
            still_open = set(self._open.get(user_id, ())) | {starting}
            return sorted(self._closed.pop(user_id, set()) - still_open)

    def note_closed(self, user_id: str, session_id: str) -> None:
        """Keep a closed session for the next read-back (its last one failed)."""
        with self._mutex:
            self._note_closed(user_id, session_id)

    def open_sessions(self, user_id: str) -> list[str]:
        with self._mutex:  # a copy: another thread may add or drop one meanwhile
            return sorted(self._open.get(user_id, ()))

    def _note_closed(self, user_id: str, session_id: str) -> None:
        """Under the mutex."""
        self._closed.setdefault(user_id, set()).add(session_id)
        self._closed.move_to_end(user_id)
        while len(self._closed) > MAX_CLOSED_USERS:
            self._closed.popitem(last=False)

"""The DB version this process last left each sandbox file at: the server's own record of
what a sandbox copy started from, beside the base records an agent can remove or garble.

A read-back trusts the sandbox's base record (:mod:`memstrata.sandbox.state`) — a file in
the agent's own directory. When it is missing, unreadable or contradicts this record, the
read-back still knows the version it last saw the file agree with (pushed, written back
or found equal): the agent's copy is written only over that version, and kept aside when
the DB holds a newer one (:func:`memstrata.sandbox.rule.decide`'s ``pushed``). Without it
(another process synced the sandbox, or this one restarted) the plain sandbox-first rule
stays.

A version noted here only ever lags behind the one the sandbox copy started from (another
process may push a newer one): a lagging fact costs a copy kept aside that could have been
written, never a DB version written over.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

# Sandbox files remembered at most (three per session sandbox, a few hundred bytes each);
# past it the least recently synced are forgotten and their read-backs fall back to the
# plain sandbox-first rule, as in a process that never synced them.
MAX_SYNCED_FILES = 30_000

Key = tuple[str, str | None, str]  # user id, session id (None: the user's sandbox), file


class SyncedVersions:
    """Versions per (user, session, file), bounded and thread-safe (module doc)."""

    def __init__(self, limit: int = MAX_SYNCED_FILES) -> None:
        self._limit = limit
        self._mutex = threading.Lock()  # shared by the threads of every loop using a service
        self._versions: OrderedDict[Key, int] = OrderedDict()

    def note(self, user_id: str, session_id: str | None, filename: str, version: int) -> None:
        key = (user_id, session_id, filename)
        with self._mutex:
            self._versions[key] = version
            self._versions.move_to_end(key)
            while len(self._versions) > self._limit:
                self._versions.popitem(last=False)

    def get(self, user_id: str, session_id: str | None, filename: str) -> int | None:
        with self._mutex:
            return self._versions.get((user_id, session_id, filename))

"""``AgentPool``: a per-user cache of agent state, invalidated in every process.

A platform keeps whatever is expensive to build per user (an agent object holding the
system prompt, tool registrations, a model client) in the pool. A frontend edit changes
the user's memory in the DB, so the cached agent is stale: the sync layer calls
:meth:`AgentPool.invalidate` after the force-push (spec 3: update DB → push → invalidate).

Several service processes share one database, and each has its own pool. An
invalidation drops the local entry at once and sends ``NOTIFY memstrata_agent_pool`` with
the user id; every pool listens on that channel from a background thread with its own
psycopg 3 connection and drops the entry when the notification arrives.

Missed notifications: while a listener is disconnected it cannot hear anything, so each
time it (re)establishes ``LISTEN`` it drops *all* cached entries — a cache miss is cheap,
a stale agent is not. The listener reconnects with exponential backoff. If sending a
NOTIFY fails the DB is unreachable, so the other listeners have lost their connections
too and will clear their caches when they reconnect.

The listener starts on the first :meth:`get` (a process that never caches has nothing to
invalidate) or on an explicit :meth:`start`; :meth:`close` stops it.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import psycopg
from psycopg import sql
from sqlalchemy import Engine, text

from memstrata.logs import log_event, log_failure

T = TypeVar("T")

logger = logging.getLogger(__name__)

CHANNEL = "memstrata_agent_pool"


def listener_conninfo(engine: Engine) -> str:
    """A libpq URL for psycopg from the SQLAlchemy engine's URL (driver name removed)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class AgentPool(Generic[T]):
    """Per-user cache with cross-process invalidation (module doc).

    ``engine`` is the database to NOTIFY and LISTEN on; without one the pool is local
    only. ``on_invalidate(user_id)`` runs after every invalidation, local or remote
    (remote ones on the listener thread), whether or not an entry was cached; the
    clear-all on a listener (re)connection does not call it.
    """

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        channel: str = CHANNEL,
        on_invalidate: Callable[[str], None] | None = None,
        reconnect_initial_s: float = 0.2,
        reconnect_max_s: float = 5.0,
        poll_s: float = 0.5,
        start_timeout_s: float = 5.0,
    ) -> None:
        self._engine = engine
        self.channel = channel
        self._on_invalidate = on_invalidate
        self._reconnect_initial_s = reconnect_initial_s
        self._reconnect_max_s = reconnect_max_s
        self._poll_s = poll_s
        self._start_timeout_s = start_timeout_s
        self.origin = secrets.token_hex(8)  # tells this pool's own notifications apart
        self._entries: dict[str, T] = {}
        # Bumped by every invalidation: a value built while one happened may be stale and
        # is returned but not cached. One counter for all users, so nothing grows.
        self._epoch = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._listening = threading.Event()
        self.connects = 0  # successful LISTENs so far, for monitoring and tests

    # -- cache ---------------------------------------------------------------------------

    def get(self, user_id: str, factory: Callable[[], T]) -> T:
        """The cached value for ``user_id``, built with ``factory`` on a miss.

        ``factory`` runs outside the lock; if two threads miss at once both build and the
        first stored value wins.
        """
        self._ensure_started()
        with self._lock:
            if user_id in self._entries:
                return self._entries[user_id]
            epoch = self._epoch
        value = factory()
        with self._lock:
            if user_id in self._entries:
                return self._entries[user_id]
            if self._epoch == epoch:
                self._entries[user_id] = value
        return value

    def peek(self, user_id: str) -> T | None:
        with self._lock:
            return self._entries.get(user_id)

    def __contains__(self, user_id: object) -> bool:
        with self._lock:
            return user_id in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def invalidate(self, user_id: str) -> None:
        """Drop ``user_id`` here at once, and in every other process through NOTIFY."""
        self._drop(user_id)
        if self._engine is None:
            return
        payload = json.dumps({"user_id": user_id, "origin": self.origin})
        try:
            with self._engine.connect() as conn:
                conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": self.channel, "payload": payload},
                )
                conn.commit()
        except Exception as exc:
            log_failure(logger, "pool.notify_failed", exc, user_id=user_id)

    def clear(self) -> None:
        """Drop every entry in this process only."""
        with self._lock:
            self._entries.clear()
            self._epoch += 1

    def _drop(self, user_id: str) -> None:
        with self._lock:
            self._entries.pop(user_id, None)
            self._epoch += 1
        if self._on_invalidate is not None:
            try:
                self._on_invalidate(user_id)
            except Exception as exc:  # a hook must not kill the listener or the caller
                log_failure(logger, "pool.hook_failed", exc, user_id=user_id)

    # -- listener ------------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def start(self, timeout_s: float | None = None) -> bool:
        """Start the listener thread; True once it is listening (False: local only, or not
        connected within the timeout — it keeps retrying in the background)."""
        if self._engine is None:
            return False
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name=f"memstrata-pool-{self.origin}", daemon=True
                )
                self._thread.start()
        return self._listening.wait(self._start_timeout_s if timeout_s is None else timeout_s)

    def close(self) -> None:
        """Stop the listener and wait for its thread; the cache stays usable locally."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=self._poll_s + 10.0)
        self._thread = None
        self._listening.clear()

    def _ensure_started(self) -> None:
        if self._engine is not None and self._thread is None and not self._stop.is_set():
            self.start()

    def _run(self) -> None:
        assert self._engine is not None
        conninfo = listener_conninfo(self._engine)
        delay = self._reconnect_initial_s
        while not self._stop.is_set():
            try:
                self._listen(conninfo)
                delay = self._reconnect_initial_s
            except Exception as exc:  # the listener must outlive any one failure
                self._listening.clear()
                log_failure(logger, "pool.listener_disconnected", exc, retry_in_s=delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._reconnect_max_s)

    def _listen(self, conninfo: str) -> None:
        with psycopg.connect(
            conninfo,
            autocommit=True,
            connect_timeout=5,
            application_name=f"memstrata-pool-{self.origin}",
        ) as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            # Anything cached before this point may have missed a notification.
            self.clear()
            self.connects += 1
            self._listening.set()
            log_event(logger, "pool.listening", channel=self.channel, connects=self.connects)
            while not self._stop.is_set():
                for notify in conn.notifies(timeout=self._poll_s):
                    self._on_notify(notify.payload)
        self._listening.clear()

    def _on_notify(self, payload: str) -> None:
        try:
            message = json.loads(payload)
            user_id, origin = message["user_id"], message.get("origin")
        except (ValueError, KeyError, TypeError):
            log_event(logger, "pool.bad_notification", logging.WARNING, payload=payload[:200])
            return
        if origin == self.origin or not isinstance(user_id, str):
            return  # our own invalidation, already applied locally
        self._drop(user_id)
        log_event(logger, "pool.invalidated", user_id=user_id, origin=origin)

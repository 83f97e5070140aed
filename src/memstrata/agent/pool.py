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

A connection can also go deaf without an error: a proxy or NAT that drops it silently
leaves the socket open and LISTEN hears nothing, while the kernel's keepalives may still
be answered (by the proxy). So every ``heartbeat_s`` the pool sends itself a notification
on a channel of its own, from another connection (a separate thread, so a send that
hangs cannot stop the listener), and a listener that has not heard it within
``heartbeat_timeout_s`` — or whose previous heartbeat is still being sent — reconnects,
which clears the cache as above.

The listener starts on the first :meth:`get` (a process that never caches has nothing to
invalidate) or on an explicit :meth:`start`; :meth:`close` stops it at once: the listener
waits on its connection and on a wake-up socket together, and ``close`` writes to the
latter (joining a thread that sat out its ``poll_s`` made every close 0.2–0.5 s slower).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sqlalchemy import Engine, text

from memstrata.db.engine import connect_args
from memstrata.logs import log_event, log_failure

T = TypeVar("T")

logger = logging.getLogger(__name__)

CHANNEL = "memstrata_agent_pool"


class ListenerDeafError(Exception):
    """The LISTEN connection stopped delivering notifications without failing."""


def listener_conninfo(engine: Engine) -> str:
    """A libpq URL for psycopg from the SQLAlchemy engine's URL (driver name removed)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class AgentPool(Generic[T]):
    """Per-user cache with cross-process invalidation (module doc).

    ``engine`` is the database to NOTIFY and LISTEN on; without one the pool is local
    only. ``on_invalidate(user_id)`` runs after every invalidation, local or remote
    (remote ones on the listener thread), whether or not an entry was cached; the
    clear-all on a listener (re)connection does not call it. ``open_check`` runs before
    each :meth:`get` and :meth:`peek` and may refuse them: a runtime's pool raises
    ``RuntimeClosedError`` once the runtime is closed, since its stopped listener would
    hear no more invalidations.
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
        heartbeat_s: float = 30.0,
        heartbeat_timeout_s: float = 15.0,
        open_check: Callable[[], None] | None = None,
    ) -> None:
        self._engine = engine
        self._open_check = open_check
        self.channel = channel
        self._on_invalidate = on_invalidate
        self._reconnect_initial_s = reconnect_initial_s
        self._reconnect_max_s = reconnect_max_s
        self._poll_s = poll_s
        self._start_timeout_s = start_timeout_s
        self._heartbeat_s = heartbeat_s
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._beat: threading.Thread | None = None
        self.origin = secrets.token_hex(8)  # tells this pool's own notifications apart
        self._entries: dict[str, T] = {}
        # Bumped by every invalidation: a value built while one happened may be stale and
        # is returned but not cached. One counter for all users, so nothing grows.
        self._epoch = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # (read end, write end): the listener's wait wakes when ``close`` writes.
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._stop = threading.Event()
        self._listening = threading.Event()
        self.connects = 0  # successful LISTENs so far, for monitoring and tests

    # -- cache ---------------------------------------------------------------------------

    def get(self, user_id: str, factory: Callable[[], T]) -> T:
        """The cached value for ``user_id``, built with ``factory`` on a miss.

        ``factory`` runs outside the lock; if two threads miss at once both build and the
        first stored value wins.
        """
        self._check_open()
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
        self._check_open()
        with self._lock:
            return self._entries.get(user_id)

    def __contains__(self, user_id: object) -> bool:
        with self._lock:
            return user_id in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _check_open(self) -> None:
        if self._open_check is not None:
            self._open_check()

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
                self._close_wake()
                self._wake = wake = socket.socketpair()
                self._thread = threading.Thread(
                    target=self._run,
                    args=(wake[0],),
                    name=f"memstrata-pool-{self.origin}",
                    daemon=True,
                )
                self._thread.start()
        return self._listening.wait(self._start_timeout_s if timeout_s is None else timeout_s)

    def close(self) -> None:
        """Stop the listener and wait for its thread; the cache stays usable locally."""
        self._stop.set()
        thread = self._thread
        if self._wake is not None:
            with contextlib.suppress(OSError):  # its buffer full: it is awake already
                self._wake[1].send(b"\0")
        if thread is not None:
            thread.join(timeout=self._poll_s + 10.0)
        if thread is None or not thread.is_alive():  # else it may still wait on it
            self._close_wake()
        self._thread = None
        self._listening.clear()

    def _close_wake(self) -> None:
        if self._wake is not None:
            for end in self._wake:
                end.close()
            self._wake = None

    def _ensure_started(self) -> None:
        if self._engine is not None and self._thread is None and not self._stop.is_set():
            self.start()

    def _run(self, wake: socket.socket) -> None:
        assert self._engine is not None
        conninfo = listener_conninfo(self._engine)
        delay = self._reconnect_initial_s
        while not self._stop.is_set():
            try:
                self._listen(conninfo, wake)
                delay = self._reconnect_initial_s
            except Exception as exc:  # the listener must outlive any one failure
                self._listening.clear()
                log_failure(logger, "pool.listener_disconnected", exc, retry_in_s=delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._reconnect_max_s)

    @property
    def heartbeat_channel(self) -> str:
        return f"{self.channel}_hb_{self.origin}"

    def _listen(self, conninfo: str, wake: socket.socket) -> None:
        with (
            selectors.DefaultSelector() as waiting,
            psycopg.connect(
                make_conninfo(conninfo, **connect_args(conninfo)),
                autocommit=True,
                application_name=f"memstrata-pool-{self.origin}",
            ) as conn,
        ):
            for channel in (self.channel, self.heartbeat_channel):
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            # Anything cached before this point may have missed a notification.
            self.clear()
            self.connects += 1
            self._listening.set()
            log_event(logger, "pool.listening", channel=self.channel, connects=self.connects)
            next_beat, awaited_since = time.monotonic() + self._heartbeat_s, None
            waiting.register(conn.fileno(), selectors.EVENT_READ)
            waiting.register(wake, selectors.EVENT_READ)
            while not self._stop.is_set():
                # What has come, taken without waiting; the wait is below, on the connection
                # and the wake-up together (psycopg's own wait watches the connection only).
                for notify in conn.notifies(timeout=0):
                    if notify.channel == self.heartbeat_channel:
                        awaited_since = None
                    else:
                        self._on_notify(notify.payload)
                now = time.monotonic()
                if awaited_since is not None and now - awaited_since > self._heartbeat_timeout_s:
                    raise ListenerDeafError(
                        f"no heartbeat heard on the LISTEN connection for "
                        f"{now - awaited_since:.1f} s"
                    )
                if now >= next_beat:
                    next_beat = now + self._heartbeat_s
                    if self._send_heartbeat() and awaited_since is None:
                        awaited_since = now
                waiting.select(self._poll_s)
        self._listening.clear()

    def _send_heartbeat(self) -> bool:
        """Send a heartbeat from another thread; False while the previous one is still
        being sent (its connection may hang, which the missing heartbeat then reveals)."""
        if self._beat is not None and self._beat.is_alive():
            return False
        self._beat = threading.Thread(
            target=self._notify_heartbeat, name=f"memstrata-pool-hb-{self.origin}", daemon=True
        )
        self._beat.start()
        return True

    def _notify_heartbeat(self) -> None:
        assert self._engine is not None
        try:
            with self._engine.connect() as conn:
                conn.execute(text("SELECT pg_notify(:c, '')"), {"c": self.heartbeat_channel})
                conn.commit()
        except Exception as exc:  # the listener sees the heartbeat missing and reconnects
            log_failure(logger, "pool.heartbeat_failed", exc)

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

"""Caps on open MCP sessions (streamable HTTP at ``/mcp``): per user, and per process.

The SDK's session manager caps sessions per process (10 000, then 503 for everyone) and
ends one on DELETE, when it has had no request in flight for its idle timeout, or when it
crashes; it counts nobody's sessions in particular. So one agent loop that initializes a
new session for every call and never closes one could take every slot of a replica.
:class:`SessionLedger` counts each user's sessions, and
:func:`memstrata.mcp.counted.serve_counted` refuses a user's session-opening request with
429 while that user holds ``per_user`` of them, before the SDK creates anything; its
``Retry-After`` is when the user's least recently used session idles out. The process's
cap (``per_server``) makes room instead: a new session past it ends the least recently
used idle session of any user (:meth:`make_room` picks it,
:func:`memstrata.mcp.owners.end_as_owner` ends it as its client's ``DELETE`` would), or
gets 503 while none is idle; the SDK's own cap is off.

The SDK has no public end-of-session hook, so the ledger follows sessions over HTTP, where
all their requests pass: a session counts from the response that hands out its
``Mcp-Session-Id`` until a DELETE of it succeeds, a request for it answers 404 (the SDK has
forgotten it: ended, expired or crashed), its ``initialize`` is answered with a JSON-RPC
error (the gate then ends it in the SDK), or it has had no request in flight for the idle
timeout the SDK was given too. A request counts as in flight until the last chunk of its
answer, when the client holds all of it; the SDK counts it until its call returns, a
moment later. That moment is the most by which the ledger lets a session go before the
SDK does (its idle timeout counted from the last chunk, a failed ``initialize`` forgotten
at it); otherwise it may count a session a moment longer than the SDK holds it, never
shorter. A session nobody asks about again is
forgotten after the idle timeout, so a cap reached by crashed clients lifts by itself.

In stateless mode (``MEMSTRATA_MCP_STATELESS``) the SDK keeps nothing between requests:
``initialize`` hands out no ``Mcp-Session-Id`` and every request stands alone. There is
nothing to count, so :func:`memstrata.mcp.http.mount_mcp` builds no ledger and no request
is counted or refused here (were it counted, each request without an id would take a slot
while it runs, and a burst of them would get 429s no session ever caused).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INVALID_REQUEST, RequestId
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.types import Scope

from memstrata.api.errors import ApiError

TOO_MANY_SESSIONS = "too_many_sessions"
SERVER_FULL = "too_many_sessions_on_server"


@dataclass
class _Session:
    user_id: str
    in_flight: int


@dataclass(frozen=True)
class Evicted:
    """A session :meth:`SessionLedger.make_room` took out of the count, for the SDK to end."""

    session_id: str
    user_id: str


class SessionLedger:
    """Who holds which MCP session, and which have gone idle; one per ``/mcp`` endpoint.

    Plain bookkeeping without awaits, so each call is atomic on the event loop. ``clock``
    is monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        per_user: int,
        idle_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        per_server: int | None = None,
    ) -> None:
        self.per_user = per_user
        self.idle_timeout_s = idle_timeout_s
        # At most this many in the process: a new one ends the least recently used idle
        # session of anyone (:meth:`make_room`), or is refused while none is idle. Each
        # session holds ~90 KB the cache budget does not see, and the SDK's own cap
        # (10 000) answered every user 503 once reached.
        self.per_server = per_server
        self._clock = clock
        # user -> open sessions plus session-opening requests in flight
        self._held: dict[str, int] = {}
        self.total = 0  # the sum of ``_held``
        self._sessions: dict[str, _Session] = {}
        # session id -> when its last request ended; times only grow, so oldest first
        self._idle: OrderedDict[str, float] = OrderedDict()

    def held(self, user_id: str) -> int:
        """The user's open sessions and session-opening requests in flight."""
        self._expire()
        return self._held.get(user_id, 0)

    def holds(self, user_id: str, session_id: str) -> bool:
        """Whether ``session_id`` is an open session of ``user_id``."""
        self._expire()
        session = self._sessions.get(session_id)
        return session is not None and session.user_id == user_id

    def next_expiry_s(self, user_id: str) -> float | None:
        """Seconds until the user's least recently used idle session reaches the idle
        timeout; None when none is idle (each has a request in flight, such as an open GET
        stream, and so cannot expire)."""
        now = self._clock()
        for session_id, idle_since in self._idle.items():  # oldest first
            if self._sessions[session_id].user_id == user_id:
                return idle_since + self.idle_timeout_s - now
        return None

    def reserve(self, user_id: str) -> bool:
        """Take a slot for a request that may open a session; False when the user has none."""
        if self.held(user_id) >= self.per_user:
            return False
        self._hold(user_id)
        return True

    def make_room(self) -> Evicted | None:
        """With the server's cap reached (counting the slot just reserved), forget the
        least recently used idle session of any user and return it, for the caller to have
        the SDK end it; None when there was room. Raises ``LookupError`` when every session
        has a request in flight: the caller gives its slot back and refuses."""
        if self.per_server is None or self.total <= self.per_server:
            return None
        if not self._idle:
            raise LookupError("no idle MCP session to end")
        session_id = next(iter(self._idle))
        evicted = Evicted(session_id, self._sessions[session_id].user_id)
        self._forget(session_id)
        return evicted

    def _hold(self, user_id: str) -> None:
        self._held[user_id] = self._held.get(user_id, 0) + 1
        self.total += 1

    def release(self, user_id: str) -> None:
        """Give back a slot whose request opened no session."""
        self._drop(user_id)

    def opened(self, user_id: str, session_id: str, *, reserved: bool) -> None:
        """The response handing out ``session_id`` has started; that request is in flight.

        ``reserved=False`` counts a session opened by a request that took no slot, so that
        a change in which requests the SDK lets open one can never let sessions go uncounted.
        """
        if not reserved:
            self._hold(user_id)
        self._sessions[session_id] = _Session(user_id, in_flight=1)

    def begin(self, user_id: str, session_id: str) -> bool:
        """A request for ``session_id`` starts. False (and nothing counted) when the ledger
        holds no such session of this user: the SDK will answer it 404."""
        self._expire()
        session = self._sessions.get(session_id)
        if session is None or session.user_id != user_id:
            return False
        session.in_flight += 1
        self._idle.pop(session_id, None)
        return True

    def finish(self, session_id: str, *, ended: bool) -> None:
        """A request :meth:`begin` or :meth:`opened` counted is over; ``ended``: so is the
        session. Nothing happens for a session already forgotten (a DELETE while a GET
        stream was open)."""
        session = self._sessions.get(session_id)
        if session is None:
            return
        session.in_flight -= 1
        if ended:
            self._forget(session_id)
        elif session.in_flight == 0:
            self._idle[session_id] = self._clock()

    def end(self, session_id: str) -> None:
        """The SDK has let ``session_id`` go after its requests were counted out (its
        opening request raised after its answer); nothing happens if already forgotten."""
        if session_id in self._sessions:
            self._forget(session_id)

    def _expire(self) -> None:
        cutoff = self._clock() - self.idle_timeout_s
        while self._idle:
            session_id, idle_since = next(iter(self._idle.items()))
            if idle_since > cutoff:
                return
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._idle.pop(session_id, None)
        self._drop(session.user_id)

    def _drop(self, user_id: str) -> None:
        if user_id in self._held:
            self.total -= 1
        left = self._held.get(user_id, 0) - 1
        if left > 0:
            self._held[user_id] = left
        else:
            self._held.pop(user_id, None)


def opens_session(headers: Headers) -> bool:
    """Whether the SDK may open a session for this request: no ``Mcp-Session-Id`` and a
    handshake-era (or no) ``MCP-Protocol-Version``; the SDK serves later versions one
    request at a time, holding nothing afterwards."""
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    return MCP_SESSION_ID_HEADER not in headers and (
        version is None or version in HANDSHAKE_PROTOCOL_VERSIONS
    )


def too_many(ledger: SessionLedger, user_id: str, scope: Scope) -> ApiError:
    """The 429 for a session-opening request of a user who holds ``per_user`` sessions."""
    path = scope.get("path", "/mcp")
    expiry_s = ledger.next_expiry_s(user_id)
    # Whole seconds, rounded up: a client that waits as told finds the slot free (unless
    # the session is used again meanwhile). With no idle session, no slot frees by itself
    # sooner than a full idle timeout.
    wait_s = max(1, math.ceil(ledger.idle_timeout_s if expiry_s is None else expiry_s))
    if expiry_s is None:
        when = (
            "none of this user's sessions is idle now (each has a request in flight, such "
            f"as an open GET stream), so none ends by itself within {wait_s} s (Retry-After)"
        )
    else:
        when = f"this user's least recently used session ends by itself in {wait_s} s (Retry-After)"
    detail = (
        f"too many open MCP sessions: this user already holds {ledger.per_user}, the most "
        "allowed (MEMSTRATA_MCP_MAX_SESSIONS_PER_USER). Reuse an open session (send its "
        "Mcp-Session-Id header) instead of initializing a new one. A session with no "
        f"request in flight ends by itself after {ledger.idle_timeout_s:g} s "
        f"(MEMSTRATA_MCP_SESSION_IDLE_TIMEOUT_S): {when}. To free a slot sooner, end a "
        f"session you no longer need with DELETE {path} and its Mcp-Session-Id header "
        "(SDK clients do this when they close)."
    )
    return _refusal(429, TOO_MANY_SESSIONS, detail, wait_s)


def server_full(ledger: SessionLedger) -> ApiError:
    """The 503 for a session-opening request on a full server with no idle session."""
    detail = (
        f"this server holds {ledger.per_server} MCP sessions, the most it allows "
        "(MEMSTRATA_MCP_MAX_SESSIONS), and each has a request in flight, so none can be "
        "ended for a new one. Retry later (Retry-After), reuse an open session, or send "
        "requests to another replica."
    )
    return _refusal(503, SERVER_FULL, detail, max(1, math.ceil(ledger.idle_timeout_s)))


def _refusal(status: int, code: str, detail: str, wait_s: int) -> ApiError:
    """A refused session-opening request: the one error shape, Retry-After, and a JSON-RPC
    error MCP clients show."""
    return ApiError(
        status,
        detail,
        code=code,
        headers={"Retry-After": str(wait_s)},
        extra=jsonrpc_error_fields(detail),
    )


def jsonrpc_error_fields(
    message: str, *, code: int = INVALID_REQUEST, request_id: RequestId | None = None
) -> dict[str, object]:
    """Fields that make an error body of ``/mcp`` a JSON-RPC error as well: MCP clients
    show its message, where they show only "Server returned an error response" for the
    plain error shape."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}

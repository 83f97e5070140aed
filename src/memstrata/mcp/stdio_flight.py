"""The requests ``memstrata mcp`` has read from stdin and not yet answered.

Two things depend on them:

- EOF. The SDK ends its loop when stdin closes and cancels every handler still running,
  answering each "Connection closed" (-32000) — while the work a handler started (a
  memory-file write finishing in a task of its own, a commit on a worker thread) went on
  and landed, so the client was told a saved entry had failed. The read stream therefore
  holds EOF back (:meth:`InFlight.settle`) until every request received is answered, for
  at most ``shutdown_grace_s`` (MEMSTRATA_SHUTDOWN_GRACE_S, the grace ``memstrata serve``
  gives requests on SIGTERM). What outlives it is cut off unanswered and logged
  (``mcp.stdio_cut_off``); the server then lets the writes under way end (``drain``, as
  ``serve`` does) before it exits.
- Backpressure: at :data:`~memstrata.mcp.stdio_lines.MAX_IN_FLIGHT` unanswered requests
  the read stream reads no further request (:meth:`InFlight.room`), so a client that
  stops reading stdout stalls on its own writes to stdin.

:class:`AnswersOut` is the write stream the SDK answers on: an answer leaves the ledger
once the stdout writer has taken it, and the SDK's "Connection closed" for a handler it
cancelled is never written, whether the cancel came from EOF past the grace or from a
signal: the server cannot know whether that handler's work landed, so it says nothing
rather than something that may be false.
"""

from __future__ import annotations

from collections import Counter
from types import TracebackType
from typing import Protocol, Self

import anyio
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)


class _Sink(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...
    async def aclose(self) -> None: ...


class InFlight:
    """Requests received, by id (the SDK's correlation: "7" and 7 are one), until their
    answer is taken for stdout or the client cancels them."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._ids: Counter[RequestId] = Counter()
        self._changed = anyio.Event()

    def __len__(self) -> int:
        return self._ids.total()

    def ids(self) -> list[RequestId]:
        return sorted(self._ids, key=str)

    def received(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest):
            self._ids[coerce_request_id(message.id)] += 1
        elif isinstance(message, JSONRPCNotification) and message.method == (
            "notifications/cancelled"
        ):
            # A request the client cancelled is never answered (the MCP spec).
            cancelled = (message.params or {}).get("requestId")
            if isinstance(cancelled, int | str) and not isinstance(cancelled, bool):
                self.answered(cancelled)

    def answered(self, request_id: RequestId) -> None:
        key = coerce_request_id(request_id)
        if self._ids[key] > 0:
            self._ids[key] -= 1
            self._ids += Counter()  # drops the ids at zero
            self._changed.set()
            self._changed = anyio.Event()

    def holds(self, request_id: RequestId) -> bool:
        return self._ids[coerce_request_id(request_id)] > 0

    async def room(self) -> None:
        """Return once fewer than the limit are in flight."""
        while len(self) >= self._limit:
            await self._changed.wait()

    async def settle(self, timeout_s: float) -> list[RequestId]:
        """Wait up to ``timeout_s`` until none is in flight; the ids still in flight."""
        with anyio.move_on_after(timeout_s):
            while len(self):
                await self._changed.wait()
        return self.ids()


class AnswersOut:
    """The SDK's write stream to stdout, keeping ``flight`` up to date (module doc)."""

    def __init__(self, inner: _Sink, flight: InFlight) -> None:
        self._inner = inner
        self._flight = flight

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if not isinstance(message, JSONRPCResponse | JSONRPCError) or message.id is None:
            await self._inner.send(item)
            return
        if (
            isinstance(message, JSONRPCError)
            and message.error.code == CONNECTION_CLOSED
            and self._flight.holds(message.id)
        ):
            self._flight.answered(message.id)  # cut off: no answer (module doc)
            return
        try:
            await self._inner.send(item)
        finally:
            self._flight.answered(message.id)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()

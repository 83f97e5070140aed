"""A bound on how long ``memstrata serve`` waits for a request's headers.

uvicorn has none: a connection that sends nothing, or its headers a byte at a time, stays
open for ever, and a few hundred of them hold every place ``MEMSTRATA_MAX_CONNECTIONS``
allows (a slowloris: everyone else gets 503). :func:`header_timeout_protocol` makes the
HTTP protocol ``serve`` runs, uvicorn's h11 one with a timer: it starts when a connection
is made and when the first byte of the next request arrives on a kept-alive one (the idle
wait before that byte is uvicorn's keep-alive timeout), and stops once h11 has the whole
request head. What follows the head — a slow body, a long response such as an /mcp GET
stream — is not its business.

On expiry the connection is closed without an answer, as nginx's client_header_timeout
does, rather than with a 408: a connection that has sent nothing looks to its client like
an idle kept-alive one, which a client expects the server to close and retries on, while
an unasked-for 408 may be read as the answer to the request it sends at that moment; and
a slowloris reads no answer anyway.

h11 is pinned rather than uvicorn's ``auto`` (httptools when installed): the package
installs h11 only, httptools measured no faster here (docs/BENCHMARKS.md, "Per-request
overhead"), and a second subclass would be code no test runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from memstrata.logs import log_event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeaderLimit:
    """The bound, and what a close it makes calls (the metric's count)."""

    timeout_s: float
    on_close: Callable[[], None]


def header_timeout_protocol(
    timeout_s: float, on_close: Callable[[], None]
) -> type[HeaderTimeoutProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``: uvicorn makes one per
    connection with its own arguments, so the bound travels on the class."""

    class Bounded(HeaderTimeoutProtocol):
        limit = HeaderLimit(timeout_s, on_close)

    return Bounded


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is late."""

    limit: ClassVar[HeaderLimit]
    _header_timer: asyncio.TimerHandle | None = None
    _header_bytes = 0  # received since the timer started, for the log line

    def connection_made(  # type: ignore[override]  # uvicorn's own signature
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        self._start_header_timer()

    def data_received(self, data: bytes) -> None:
        # IDLE with no timer: the first byte of the next request on a kept-alive connection
        # (uvicorn's keep-alive timer, which bounded the wait for it, stops here).
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._start_header_timer()
        self._header_bytes += len(data)
        super().data_received(data)
        # Past IDLE once h11 has parsed the request line and headers (or refused them).
        if self.conn.their_state is not h11.IDLE:
            self._stop_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def _start_header_timer(self) -> None:
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self.limit.timeout_s, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        log_event(
            logger,
            "http.header_timeout",
            client=peer(self.client),
            cause="request headers incomplete" if self._header_bytes else "no request",
            received_bytes=self._header_bytes,
            timeout_s=self.limit.timeout_s,
        )
        self.limit.on_close()
        self.transport.close()


def peer(address: tuple[str, int] | None) -> str | None:
    """``host:port`` of a connection's other end (None when the transport did not say)."""
    if address is None:
        return None
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

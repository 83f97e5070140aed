"""A bound on how long ``memstrata serve`` waits for the next part of a request's body.

:mod:`memstrata.api.header_timeout` bounds the request head; after it, a client that
announced a body (``Content-Length`` or chunked) and then stopped sending held its
connection, and the request's task waited in ``receive()``, for ever — a few hundred such
clients (with a valid token: the body is read after authentication) held every place
``MEMSTRATA_MAX_CONNECTIONS`` allows. :class:`BodyTimeoutProtocol` adds a second timer: it
runs while the client still owes body bytes and restarts at each one that arrives, so it
bounds the gap between two parts of a body (nginx's ``client_body_timeout``), not the
whole upload — a slow link that keeps sending is never cut.

It does not run while the wait is the server's: while uvicorn has paused reading because
the application has not taken the body received so far (its flow control), and while the
client waits for ``100 Continue`` before sending (``Expect: 100-continue``), which uvicorn
sends only when the application first asks for the body.

On expiry the client gets a 408 in the one error shape (it sent a request, so an answer
cannot be mistaken for that of another), unless a response has begun; the connection is
then closed and the request's task sees a disconnect, as for a client that hung up.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import h11

from memstrata.api.error_shape import error_body
from memstrata.api.header_timeout import HeaderLimit, HeaderTimeoutProtocol, peer
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 408


@dataclass(frozen=True)
class BodyLimit:
    """The bound, and what a timeout calls (the metric's count)."""

    timeout_s: float
    on_timeout: Callable[[], None]


def read_timeout_protocol(header: HeaderLimit, body: BodyLimit) -> type[BodyTimeoutProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``, with both bounds: uvicorn makes
    one per connection with its own arguments, so the bounds travel on the class."""

    class Bounded(BodyTimeoutProtocol):
        limit = header
        body_limit = body

    return Bounded


def timeout_answer(timeout_s: float) -> bytes:
    """The 408's JSON body: what happened and how to fix it."""
    seconds = f"{timeout_s:g}"
    detail = (
        f"the request body stopped arriving: nothing came for {seconds} s before it was "
        f"complete (MEMSTRATA_BODY_TIMEOUT_S); send the whole body the Content-Length "
        f"announces without pausing, or ask the operator to raise the setting"
    )
    return json.dumps(error_body(REQUEST_TIMEOUT, detail, code="request_timeout")).encode()


class BodyTimeoutProtocol(HeaderTimeoutProtocol):
    """The header-bounded h11 protocol, also answering 408 to a body that stops coming."""

    body_limit: ClassVar[BodyLimit]
    _body_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.SEND_BODY:
            self._start_body_timer()
        else:
            self._stop_body_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_body_timer()
        super().connection_lost(exc)

    def _start_body_timer(self) -> None:
        self._stop_body_timer()
        self._body_timer = self.loop.call_later(self.body_limit.timeout_s, self._body_late)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if (
            self.transport.is_closing()
            or self.conn.their_state is not h11.SEND_BODY
            or cycle is None
            or cycle.response_complete
        ):
            return  # nothing owed, or an answer already given (uvicorn's keep-alive timer)
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            self._start_body_timer()  # the server's wait, not the client's
            return
        log_event(
            logger,
            "http.body_timeout",
            client=peer(self.client),
            method=cycle.scope["method"],
            path=cycle.scope["path"],
            received_bytes=self._header_bytes,  # the request's so far, its head included
            timeout_s=self.body_limit.timeout_s,
        )
        self.body_limit.on_timeout()
        if not cycle.response_started:
            self._answer_408()
        # What uvicorn does when a client hangs up: the request's receive() returns a
        # disconnect now, and its send() writes nothing more.
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.close()

    def _answer_408(self) -> None:
        body = timeout_answer(self.body_limit.timeout_s)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            head = self.conn.send(h11.Response(status_code=REQUEST_TIMEOUT, headers=headers))
            self.transport.write((head or b"") + (self.conn.send(h11.Data(data=body)) or b""))
            self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError:
            pass  # h11 will not frame an answer in this state: the close alone tells

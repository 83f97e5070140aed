"""MCP over stdin/stdout for one user (``memstrata mcp --user U``).

Local use: the process owner is trusted and names the user; every call is scoped to it.
Nothing but protocol messages may reach stdout: logs go to stderr, and while serving the
SDK points fd 1 at stderr so stray output from libraries or children cannot corrupt the
stream.

A line the SDK cannot parse reaches the server as an exception, which the SDK's server
offers no hook for and drops with a debug log, leaving the client to wait for ever.
:class:`AnsweringReadStream` answers each one instead (a JSON-RPC parse error, see
:mod:`memstrata.mcp.parse_errors`), logs it with the user, and serves the next line.
A request whose ``id`` is not a string or an integer the SDK parses as a notification and
never answers either; that is visible only in the line itself, so stdin is read here
(:class:`CheckedLines`, on a descriptor of its own, as the SDK would) and such a line is
answered with ``-32600`` instead of being served. So are a line over its limit (a
whole-file tool's call may be as large as the REST PUT's body, any other line
MEMSTRATA_MAX_REQUEST_BYTES) and one that is not UTF-8 (:mod:`memstrata.mcp.stdio_lines`).
At EOF the requests already read are answered before the server ends, within the
shutdown grace, and at most ``MAX_IN_FLIGHT`` unanswered requests are read ahead
(:mod:`memstrata.mcp.stdio_flight`).
"""

from __future__ import annotations

import contextvars
import fcntl
import logging
import os
import secrets
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Protocol, Self, cast

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, RequestId
from pydantic import ValidationError

from memstrata.logs import describe, log_event
from memstrata.mcp.body_limit import MessageLimits
from memstrata.mcp.parse_errors import BadMessage, bad_line, unusable_id
from memstrata.mcp.server import build_server
from memstrata.mcp.stdio_flight import AnswersOut, InFlight
from memstrata.mcp.stdio_lines import MAX_IN_FLIGHT, read_lines
from memstrata.memory.kinds import validate_user_id
from memstrata.runtime import Memstrata, drain_timeout_s

logger = logging.getLogger(__name__)


class _Items(Protocol):
    """The read side of the SDK's stdio transport."""

    async def receive(self) -> SessionMessage | Exception: ...
    async def aclose(self) -> None: ...


class _Sink(Protocol):
    """The write side of the SDK's stdio transport."""

    async def send(self, item: SessionMessage, /) -> None: ...


async def serve_stdio(mem: Memstrata, user_id: str) -> None:
    """Answer MCP requests on stdin/stdout as ``user_id`` until stdin closes."""
    user = validate_user_id(user_id)
    settings = mem.settings
    server = build_server(lambda: mem, lambda _ctx: user)
    flight = InFlight(MAX_IN_FLIGHT)
    with claimed_stdin() as stdin:
        lines = CheckedLines(read_lines(stdin, MessageLimits.of(settings)))
        async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
            answers = AnswersOut(write, flight)
            answering = AnsweringReadStream(
                read,
                write,
                user,
                refusal=lines.refusal,
                flight=flight,
                grace_s=settings.shutdown_grace_s,
            )
            await server.run(answering, answers, server.create_initialization_options())
    if answering.cut_off:
        # As serve after its grace: the writes those requests started end before the
        # runtime closes, instead of being cancelled with the event loop.
        await mem.drain(drain_timeout_s(settings))


@contextmanager
def claimed_stdin() -> Iterator[int]:
    """A descriptor of its own for the process's stdin, while fd 0 points at the null
    device — what the SDK does when it reads stdin itself — so a child or a library
    reading fd 0 gets EOF instead of protocol bytes. Restored on exit; the private
    descriptor is never closed, since a worker thread may still block on it."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:  # no fd 0 to claim: its first read ends the server
        yield 0
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield private
    finally:
        os.dup2(private, 0)


class CheckedLines:
    """stdin's lines for the SDK's reader. One refused before the SDK parses it (a
    request with an unusable id, a line over the limit or not UTF-8:
    :mod:`memstrata.mcp.stdio_lines`) goes on as a marker line, which the SDK's parse
    turns into an exception that :meth:`refusal` maps back to its answer: answered and
    logged by :class:`AnsweringReadStream` with the SDK's own refusals, in line order."""

    def __init__(self, lines: AsyncIterable[str | BadMessage]) -> None:
        self._lines = lines
        # No client line can match it by chance: a random token of this process.
        self._marker = f"memstrata-refused-{secrets.token_hex(16)}\n"
        self._refused: deque[BadMessage] = deque()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            answer = line if isinstance(line, BadMessage) else unusable_id(line)
            if answer is None:
                yield cast("str", line)
            else:
                self._refused.append(answer)
                yield self._marker

    def refusal(self, exc: Exception) -> BadMessage | None:
        """The answer of the refused line whose marker the SDK failed to parse as
        ``exc``, else None (an exception of the SDK's own)."""
        if not self._refused or not isinstance(exc, ValidationError):
            return None
        if any(error.get("input") == self._marker for error in exc.errors()):
            return self._refused.popleft()
        return None


class AnsweringReadStream:
    """The SDK's read stream without its exception items: each is answered on ``write``
    with a JSON-RPC error and logged as ``mcp.parse_error`` (WARNING) for ``user_id``."""

    def __init__(
        self,
        inner: _Items,
        write: _Sink,
        user_id: str,
        *,
        refusal: Callable[[Exception], BadMessage | None] | None = None,
        flight: InFlight | None = None,
        grace_s: float = 0.0,
    ) -> None:
        self._inner = inner
        self._write = write
        self._user_id = user_id
        self._refusal = refusal
        self._flight = flight
        self._grace_s = grace_s
        self._ended = False
        self.cut_off: list[RequestId] = []

    @property
    def last_context(self) -> contextvars.Context | None:
        """The sender's context of the last item (the SDK's relay reads it)."""
        context = getattr(self._inner, "last_context", None)
        return context if isinstance(context, contextvars.Context) else None

    async def receive(self) -> SessionMessage:
        while True:
            try:
                item = await self._inner.receive()
            except anyio.EndOfStream:
                await self._settle()
                raise
            if not isinstance(item, SessionMessage):
                await self._answer(item)
            elif self._flight is None:
                return item
            else:
                if isinstance(item.message, JSONRPCRequest):
                    await self._flight.room()  # backpressure: stdin is not read meanwhile
                self._flight.received(item)
                return item

    async def _settle(self) -> None:
        """At EOF: the requests received are answered first, within the grace
        (:mod:`memstrata.mcp.stdio_flight`)."""
        if self._flight is None or self._ended:
            return
        self._ended = True
        self.cut_off = await self._flight.settle(self._grace_s)
        if self.cut_off:
            log_event(
                logger,
                "mcp.stdio_cut_off",
                logging.WARNING,
                user_id=self._user_id,
                request_ids=self.cut_off,
                grace_s=self._grace_s,
            )

    async def _answer(self, exc: Exception) -> None:
        answer = self._refusal(exc) if self._refusal is not None else None
        answer = answer or bad_line(exc)
        if answer is None:
            logger.debug("blank line on stdin ignored")
            return
        answer.log(logger, self._user_id)
        try:
            await self._write.send(answer.session_message())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as closed:
            # The server is ending (stdin closed): nobody is left to read the answer.
            logger.debug("parse error not sent: %s", describe(closed))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()

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
answered with ``-32600`` before the SDK sees it.
"""

from __future__ import annotations

import contextvars
import fcntl
import logging
import os
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from io import TextIOWrapper
from types import TracebackType
from typing import Protocol, Self, cast

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from memstrata.logs import describe
from memstrata.mcp.parse_errors import bad_line, unusable_id
from memstrata.mcp.server import build_server
from memstrata.memory.kinds import validate_user_id
from memstrata.runtime import Memstrata

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
    server = build_server(lambda: mem, lambda _ctx: user)
    with claimed_stdin() as stdin:
        lines = CheckedLines(stdin, user)
        async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
            lines.answer_on(write)
            answering = AnsweringReadStream(read, write, user)
            await server.run(answering, write, server.create_initialization_options())


@contextmanager
def claimed_stdin() -> Iterator[AsyncIterable[str]]:
    """The process's stdin as UTF-8 lines, read from a descriptor of its own while fd 0
    points at the null device — what the SDK does when it reads stdin itself — so a child
    or a library reading fd 0 gets EOF instead of protocol bytes. Restored on exit; the
    private descriptor is never closed, since a worker thread may still block on it."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:  # no fd 0 to claim: read sys.stdin as it is
        yield anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        binary = os.fdopen(private, "rb", closefd=False)
        yield anyio.wrap_file(TextIOWrapper(binary, encoding="utf-8", errors="replace"))
    finally:
        os.dup2(private, 0)


class CheckedLines:
    """stdin's lines for the SDK's reader, less those holding a request with an unusable
    id, which are answered on the write stream (once :meth:`answer_on` gave it) and
    logged as ``mcp.parse_error`` for ``user_id``."""

    def __init__(self, lines: AsyncIterable[str], user_id: str) -> None:
        self._lines = lines
        self._user_id = user_id
        self._write: _Sink | None = None
        self._ready = anyio.Event()

    def answer_on(self, write: _Sink) -> None:
        self._write = write
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            answer = unusable_id(line)
            if answer is None:
                yield line
                continue
            answer.log(logger, self._user_id)
            await self._ready.wait()
            assert self._write is not None
            try:
                await self._write.send(answer.session_message())
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as closed:
                logger.debug("parse error not sent: %s", describe(closed))


class AnsweringReadStream:
    """The SDK's read stream without its exception items: each is answered on ``write``
    with a JSON-RPC error and logged as ``mcp.parse_error`` (WARNING) for ``user_id``."""

    def __init__(
        self,
        inner: _Items,
        write: _Sink,
        user_id: str,
    ) -> None:
        self._inner = inner
        self._write = write
        self._user_id = user_id

    @property
    def last_context(self) -> contextvars.Context | None:
        """The sender's context of the last item (the SDK's relay reads it)."""
        context = getattr(self._inner, "last_context", None)
        return context if isinstance(context, contextvars.Context) else None

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._inner.receive()
            if isinstance(item, SessionMessage):
                return item
            await self._answer(item)

    async def _answer(self, exc: Exception) -> None:
        answer = bad_line(exc)
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

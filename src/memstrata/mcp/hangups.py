"""Watching, over HTTP, for the client of a tool call that hangs up: the MCP side of REST's
rule (:mod:`memstrata.api.hangups`), for ``conversation_index_turn`` (its embedding ends,
the turn stored for the worker) and ``memory_search`` (its query is not embedded, or its
embedding abandoned: ``retrieval.hangup``), and around every tool call, whose cancel is
then logged as the client's, not a fault (``failure_answers.run_tool``)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request

from memstrata.api.hangups import client_gone


@asynccontextmanager
async def watching_client(request: object) -> AsyncIterator[threading.Event]:
    """An event set if the HTTP client that sent the call hangs up while the block runs
    (REST's ``client_gone``). The SDK hands a tool the call's Starlette request, whose body
    it has read, so the next ASGI message is the disconnect; over stdio (no request) the
    event is never set. The SDK's own disconnect watch (2026-07-28 wire, SSE) cancels the
    handler, which still waits for its worker thread: the event is what ends the thread's
    embedding."""
    if not isinstance(request, Request):
        yield threading.Event()
        return
    async with asynccontextmanager(client_gone)(request) as gone:
        yield gone

"""``memstrata mcp --user U``: the MCP server over stdio, on the same embedded defaults as
``memstrata serve`` (embedded PostgreSQL unless ``MEMSTRATA_DATABASE_URL`` is set, the
local embedding server unless an embedding API is configured)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Annotated, NoReturn

import typer

from memstrata.cli.app import app, fail, load_settings, open_runtime
from memstrata.cli.local_dirs import local_dir_problem
from memstrata.cli.user_ids import UserJson, chosen_user
from memstrata.errors import EmbeddingError, InvalidUserIdError
from memstrata.memory.kinds import validate_user_id


@app.command("mcp")
def mcp_stdio(
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="The user whose memory this server serves.")
    ] = None,
    user_json: UserJson = None,
) -> None:
    """Serve MCP over stdin/stdout for one user (for clients that launch a command).

    Logs go to stderr. For MCP over HTTP with bearer tokens use `memstrata serve` (/mcp).
    """
    option = "--user" if user is not None else "--user-json"
    user = chosen_user(user, user_json)
    try:
        validate_user_id(user)
    except InvalidUserIdError as exc:
        fail(f"{option}: {exc}")
    settings = load_settings(log_level=None)
    problem = local_dir_problem(settings)  # as serve: before anything starts
    if problem is not None:
        fail(problem)
    import anyio

    from memstrata.mcp.stdio import serve_stdio

    try:
        with open_runtime(settings) as mem, _ctrl_c_unwinds_at_once():
            anyio.run(serve_stdio, mem, user)
    except EmbeddingError as exc:
        fail(f"{exc}; set MEMSTRATA_EMBEDDING_AUTOSTART=false to search with BM25 only")
    except KeyboardInterrupt:
        _exit_now(0)
    except SystemExit as exc:  # SIGTERM (memstrata.cli.main): 143
        _exit_now(exc.code if isinstance(exc.code, int) else 1)


@contextmanager
def _ctrl_c_unwinds_at_once() -> Iterator[None]:
    """Ctrl-C raises at once, as SIGTERM does. anyio.run would replace Python's default
    handler with one that cancels the server's task group, which then waits for the SDK's
    stdin reader: a worker thread blocked on stdin until the client writes or closes it.
    (anyio keeps any handler other than the default one.)"""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # ignored (a background job), or someone else's handler: left alone
        return
    previous = signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _raise_keyboard_interrupt(_signum: int, _frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def _exit_now(status: int) -> NoReturn:
    """End the process once ``open_runtime`` has stopped the servers it started. A normal
    exit would join every thread first, and the SDK's stdin reader stays blocked for as
    long as the client keeps stdin open: after SIGTERM the process lived on until it did."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)

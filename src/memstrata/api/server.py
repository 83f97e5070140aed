"""The uvicorn server ``memstrata serve`` runs, and what its shutdown says in the log.

On SIGTERM (or Ctrl-C) it logs ``shutdown.started`` with the grace it gives the requests
in flight (``MEMSTRATA_SHUTDOWN_GRACE_S``) and the limit on their work after it
(``after_grace_s``): before, the first line of a shutdown was uvicorn's. When the grace
runs out uvicorn logs "Cancel N running task(s), timeout graceful shutdown exceeded" at
ERROR; that is the grace doing its job (those requests get a 503 ``shutting_down``, one
``http.cut_off_by_shutdown`` line each), so :class:`GraceEndedFilter` turns that line
into memstrata's ``shutdown.grace_ended`` WARNING. uvicorn itself is not changed: a
subclass with its documented hooks, and a filter on its logger.

:func:`connection_limit` is uvicorn's ``limit_concurrency`` for ``memstrata serve``
(``MEMSTRATA_MAX_CONNECTIONS``, by default derived from the open-file limit).
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from types import FrameType

import uvicorn

from memstrata.logs import as_event, log_event

logger = logging.getLogger(__name__)

UVICORN_LOGGER = "uvicorn.error"
# uvicorn's own words (uvicorn.server.Server.shutdown) when the grace runs out; should they
# change, the line stays uvicorn's ERROR (tests/cli/test_shutdown_grace.py notices).
_GRACE_ENDED = "Cancel %s running task(s), timeout graceful shutdown exceeded"
# The default connection limit's ceiling: an open /mcp GET stream for each of the default
# MEMSTRATA_MCP_MAX_SESSIONS (2000) sessions, and as much again for everything else.
MAX_DEFAULT_CONNECTIONS = 4096


def connection_limit(configured: int | None, open_files: int | None = None) -> int:
    """``MEMSTRATA_MAX_CONNECTIONS``, or by default half of ``open_files`` (the soft
    RLIMIT_NOFILE; None: read it), at most :data:`MAX_DEFAULT_CONNECTIONS`. uvicorn accepts
    connections beyond its limit (and answers their requests 503), so each still takes a
    descriptor: half stays for those and for what the requests open (files, database and
    embedding connections)."""
    if configured is not None:
        return configured
    soft = open_file_limit() if open_files is None else open_files
    if soft is None:
        return MAX_DEFAULT_CONNECTIONS
    return max(2, min(MAX_DEFAULT_CONNECTIONS, soft // 2))


def open_file_limit() -> int | None:
    """This process's soft limit on open files; None when unlimited or unknown."""
    if sys.platform == "win32":
        return None
    import resource  # Unix only

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class MemstrataServer(uvicorn.Server):
    """uvicorn's server, logging the start of its shutdown."""

    def __init__(self, config: uvicorn.Config, *, after_grace_s: float) -> None:
        super().__init__(config)
        self.after_grace_s = after_grace_s
        self.stop_signal: str | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: only note the signal, the log line comes from the event loop.
        if self.stop_signal is None:
            self.stop_signal = signal.Signals(sig).name
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        log_event(
            logger,
            "shutdown.started",
            signal=self.stop_signal,
            grace_s=self.config.timeout_graceful_shutdown,
            after_grace_s=self.after_grace_s,
            requests_in_flight=len(self.server_state.tasks),
        )
        await super().shutdown(sockets)


class GraceEndedFilter(logging.Filter):
    """uvicorn's "Cancel N running task(s)" ERROR as ``shutdown.grace_ended``, a WARNING:
    the requests still running when the grace ran out are cut off, as configured."""

    def __init__(self, grace_s: float | None) -> None:
        super().__init__()
        self.grace_s = grace_s

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _GRACE_ENDED and record.levelno == logging.ERROR:
            cancelled = record.args[0] if isinstance(record.args, tuple) and record.args else None
            as_event(
                record,
                logging.WARNING,
                "shutdown.grace_ended",
                requests=cancelled,
                grace_s=self.grace_s,
                effect="expected: the requests still running after MEMSTRATA_SHUTDOWN_GRACE_S "
                "are cancelled and answered 503 shutting_down (http.cut_off_by_shutdown)",
            )
        return True


def explain_grace_end(grace_s: float | None) -> None:
    """Install :class:`GraceEndedFilter` on uvicorn's logger (once)."""
    uvicorn_logger = logging.getLogger(UVICORN_LOGGER)
    for old in [f for f in uvicorn_logger.filters if isinstance(f, GraceEndedFilter)]:
        uvicorn_logger.removeFilter(old)
    uvicorn_logger.addFilter(GraceEndedFilter(grace_s))

"""The local server's supervision: the thread that looks at the child, and the rules for
the pause before a restart (``local_server.LocalEmbeddingServer`` applies them).

The pause doubles after every exit or failed start, up to a maximum, and starts over
once a server has stayed up that long: a server that crashes at every start is not
restarted every second for ever, and one that crashed once after a long run comes back
quickly.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Protocol

from memstrata.logs import describe, log_event

# The local server's events keep its logger name (embedding.local_server.*).
logger = logging.getLogger("memstrata.retrieval.local_server")

# How often the supervisor looks at its child: a dead server is noticed and reaped within
# this (one waitpid(WNOHANG) per tick).
SUPERVISE_POLL_S = 0.5
# The first pause before a restart, and the most it grows to (see the module docstring).
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 60.0


def next_restart_delay(delay_s: float, max_delay_s: float) -> float:
    """The pause after one more exit or failed start: doubled, at most ``max_delay_s``."""
    return min(delay_s * 2, max_delay_s)


def settled_restart_delay(
    delay_s: float, up_for_s: float, first_delay_s: float, max_delay_s: float
) -> float:
    """The pause for a server that has been up ``up_for_s``: back to the first one once
    it stayed up as long as the longest pause (it is not crash-looping), else as is."""
    return first_delay_s if up_for_s >= max_delay_s else delay_s


def signal_name(returncode: int) -> str | None:
    """The signal that killed a child (``Popen`` reports it as a negative code), if any."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return str(-returncode)


class Supervised(Protocol):
    def _check_child(self, stopping: threading.Event) -> None:
        """One supervisor tick: reap a child that exited, log it and restart it."""


def supervise(server_ref: Callable[[], Supervised | None], stopping: threading.Event) -> None:
    """The supervisor thread. It holds the server (through a weak reference) only during a
    check, so a server whose owner forgot ``stop()`` is still collected (its finalizer
    sets ``stopping``)."""
    while not stopping.wait(SUPERVISE_POLL_S):
        server = server_ref()
        if server is None:
            return
        try:
            server._check_child(stopping)
        except Exception as exc:  # a bug here must not end supervision silently
            log_event(
                logger,
                "embedding.local_server.supervisor_failed",
                logging.ERROR,
                exc_info=exc,
                error=describe(exc),
            )
        del server

"""The background threads a runtime depends on, watched: one that died is started again,
and ``/readyz`` says so.

Each worker's loop catches its own failures and goes on (``embedding.heal.loop_failed``,
``db.monitor.crashed``), but an exception those handlers do not catch (a ``BaseException``,
a failure inside a handler) ended the thread without a word: before, ``/readyz`` said
ready and ``ok`` while no row got a vector again, or while nothing watched the database.
``check`` (each ``/readyz``, or a library host's ``Memstrata.check_background``) finds a
worker that should run and does not, logs ``runtime.worker_died`` (ERROR) and starts it
again: ``"background": "restarted"`` for ``RESTARTED_SHOWN_S`` then. One that died
``RESTARTS_MOST`` times within ``RESTARTS_WINDOW_S`` is left dead (a failure that repeats
would be restarted in a loop): ``"background": "dead"``, and the process needs
restarting (``runtime.worker_dead``, ERROR).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from memstrata.logs import describe, log_event

logger = logging.getLogger(__name__)

# A restart is told by /readyz this long (a load balancer polls every few seconds).
RESTARTED_SHOWN_S = 60.0
# This many deaths of one worker within the window: left dead, the process needs a restart.
RESTARTS_MOST = 3
RESTARTS_WINDOW_S = 600.0

BackgroundState = Literal["restarted", "dead"]


class Stoppable(Protocol):
    def stop(self) -> None: ...
    def start(self) -> None: ...


def again(worker: Stoppable) -> Callable[[], None]:
    """How to start a worker whose thread died: ``stop`` first releases what the dead one
    held (the healer's claims and lock, the monitor's connection), then ``start``."""

    def restart() -> None:
        worker.stop()
        worker.start()

    return restart


@dataclass
class _Worker:
    running: Callable[[], bool]
    restart: Callable[[], None]
    deaths: deque[float] = field(default_factory=deque)
    given_up: bool = False


@dataclass(frozen=True)
class BackgroundHealth:
    """What ``/readyz`` says of the background threads: None while each one runs and none
    was restarted lately; else the state and the workers it is about."""

    state: BackgroundState
    workers: tuple[str, ...]


class WorkerWatch:
    """The workers that should run now (``watch`` .. ``forget``), by name (thread-safe)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._restarted: dict[str, float] = {}  # name: when, for RESTARTED_SHOWN_S

    def watch(self, name: str, running: Callable[[], bool], restart: Callable[[], None]) -> None:
        """``name`` runs from now on; ``restart`` starts it again after it died."""
        with self._lock:
            self._workers[name] = _Worker(running, restart)

    def forget(self) -> None:
        """The workers are being stopped: none of them is expected to run any more."""
        with self._lock:
            self._workers.clear()
            self._restarted.clear()

    def check(self) -> BackgroundHealth | None:
        """Start again each watched worker that died (module docstring); what to tell."""
        with self._lock:  # one check at a time: two probes must not start a worker twice
            now = self._clock()
            for name, worker in self._workers.items():
                if worker.given_up or worker.running():
                    continue
                self._died(name, worker, now)
            dead = tuple(sorted(n for n, w in self._workers.items() if w.given_up))
            if dead:
                return BackgroundHealth("dead", dead)
            shown = now - RESTARTED_SHOWN_S
            restarted = tuple(sorted(n for n, at in self._restarted.items() if at >= shown))
        return BackgroundHealth("restarted", restarted) if restarted else None

    def _died(self, name: str, worker: _Worker, now: float) -> None:
        worker.deaths.append(now)
        while worker.deaths and worker.deaths[0] < now - RESTARTS_WINDOW_S:
            worker.deaths.popleft()
        if len(worker.deaths) > RESTARTS_MOST:
            worker.given_up = True
            log_event(
                logger,
                "runtime.worker_dead",
                logging.ERROR,
                worker=name,
                deaths=len(worker.deaths),
                within_s=RESTARTS_WINDOW_S,
                hint="it keeps dying (see the errors logged before): restart memstrata; "
                "/readyz says background: dead",
            )
            return
        log_event(
            logger,
            "runtime.worker_died",
            logging.ERROR,
            worker=name,
            deaths=len(worker.deaths),
            effect="started again",
        )
        try:
            worker.restart()
        except Exception as exc:
            log_event(
                logger,
                "runtime.worker_restart_failed",
                logging.ERROR,
                worker=name,
                error=describe(exc),
            )
            return
        self._restarted[name] = now

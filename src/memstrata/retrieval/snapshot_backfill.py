"""``memstrata snapshots`` made by a started server itself, in a low-priority child process.

A user without an index snapshot pays a whole cold load on their first search (~0.35 s in
process at 10k rows, 0.4–0.55 s over HTTP, against ~0.2 s from a snapshot;
docs/BENCHMARKS.md). The table is UNLOGGED, so a database crash empties it, and an upgrade
from a release without snapshots or rows that came in without the warmer leave users
without one until each searches again. After ``start_background`` this writes them ahead
with ``backfill.write_missing_snapshots`` (the command's pass):

* only when there is something to write: ``start`` asks first, on a thread of its own so
  the server's start does not wait, whether any user lacks a snapshot (the pass's own
  ``users_without_snapshot``); the child, ~1.1 s of CPU and 100 MB, was started on every
  server start, the test suite's included, mostly to find nothing;
* in a child process at the lowest CPU priority: a pass on a thread of the server took
  the interpreter lock from its searches in turns (another user's warm search went from
  p95 45 to 140 ms while it ran, docs/RELIABILITY.md), which no thread priority changes;
  it loads into an index cache of its own, so a search of the user it is loading waits
  for nothing of it;
* replicas that start together share the users (the claim in ``backfill``);
* ``stop`` (SIGTERM to the child, which the child also gets when the server dies) ends it
  before the next user, without waiting for a write under way; a child that has not
  ended within ``STOP_S`` is killed.

Each pass logs ``snapshots.backfill`` (from the child, to the server's stderr) with its
counts and duration; a start with nothing to write logs ``snapshots.backfill.none_missing``
at DEBUG only.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import make_engine, make_session_factory
from memstrata.logs import configure_logging, log_event, log_failure
from memstrata.retrieval.backfill import (
    Backfilled,
    users_without_snapshot,
    write_missing_snapshots,
)
from memstrata.retrieval.local_server_spawn import NICEST, lower_priority
from memstrata.retrieval.parent_death import popen_ending_with_process

# By name: the child runs this module as ``__main__``, outside the ``memstrata`` loggers.
logger = logging.getLogger("memstrata.retrieval.snapshot_backfill")

# How long ``stop`` waits for the child to end before killing it: a load under way is not
# interrupted (at 10k rows ~0.35 s), and a kill loses nothing but that user's snapshot.
STOP_S = 2.0
# The child's job (the database URL, with its password, is kept out of the command line).
JOB_VARIABLE = "_MEMSTRATA_SNAPSHOT_BACKFILL"


class SnapshotBackfill:
    """One pass over the users without a current snapshot, in one child process, started
    only if a check (on a thread of the server) finds such a user."""

    def __init__(
        self, url: str, model: str | None, min_rows: int, log_level: str, log_json: bool
    ) -> None:
        self._url, self._model, self._min_rows = url, model, min_rows
        self._job = json.dumps(
            {
                "url": url,
                "model": model,
                "min_rows": min_rows,
                "log_level": log_level,
                "log_json": log_json,
            }
        )
        # Orders the check's start of the child against ``stop``: none starts after it.
        self._lock = threading.Lock()
        self._stopped = False
        self._check: threading.Thread | None = None
        self._child: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the pass (once; a second call does nothing) and return at once: a thread
        asks whether any user lacks a snapshot, and only then starts the child."""
        with self._lock:
            if self._check is not None or self._stopped:
                return
            self._check = threading.Thread(
                target=self._start_if_needed, name="snapshot-backfill-check", daemon=True
            )
        self._check.start()

    def _start_if_needed(self) -> None:
        try:
            needed = self._any_user_without_snapshot()
        except Exception as exc:
            log_failure(logger, "snapshots.backfill.failed", exc)
            return
        if not needed:
            log_event(logger, "snapshots.backfill.none_missing", logging.DEBUG)
            return
        with self._lock:
            if self._stopped:
                return
            env = {**os.environ, JOB_VARIABLE: self._job}
            command = [sys.executable, "-m", "memstrata.retrieval.snapshot_backfill"]
            with os.fdopen(os.dup(2), "wb") as stderr:  # the server's own logs' destination
                child = self._child = popen_ending_with_process(command, env=env, stderr=stderr)
        lower_priority(child.pid, NICEST)

    def _any_user_without_snapshot(self) -> bool:
        # An engine of its own, as the child's: the runtime hands this class its URL only.
        engine = make_engine(self._url, pool_size=1)
        try:
            with make_session_factory(engine)() as session:
                return bool(users_without_snapshot(session, self._model, self._min_rows))
        finally:
            engine.dispose()

    @property
    def running(self) -> bool:
        """Whether the check or the child is under way."""
        check, child = self._check, self._child
        return (check is not None and check.is_alive()) or (
            child is not None and child.poll() is None
        )

    def stop(self, timeout_s: float = STOP_S) -> None:
        """End the pass: a check under way starts no child (it is not waited for: a
        daemon thread, its engine its own); a child gets SIGTERM, and is killed after
        ``timeout_s``."""
        with self._lock:
            self._stopped = True
            child = self._child
        if child is None or child.poll() is not None:
            return
        child.terminate()
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run_pass(
    sessions: sessionmaker[Session], model: str | None, min_rows: int, stop: threading.Event
) -> Backfilled | None:
    """The pass, logged; failures are logged, never raised (derived data: a search writes
    what is missing)."""
    began = time.perf_counter()
    try:
        done = write_missing_snapshots(sessions, model, min_rows, stop=stop)
    except Exception as exc:
        log_failure(logger, "snapshots.backfill.failed", exc)
        return None
    log_event(
        logger,
        "snapshots.backfill",
        users=done.users,
        written=done.written,
        failed=done.failed,
        skipped=done.skipped,
        stopped=done.stopped,
        ms=round((time.perf_counter() - began) * 1000, 1),
    )
    return done


def main() -> None:
    """The child: the job from the environment, SIGTERM as the stop."""
    job = json.loads(os.environ.pop(JOB_VARIABLE))
    configure_logging(job["log_level"], job["log_json"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    engine = make_engine(job["url"], pool_size=2)
    try:
        run_pass(make_session_factory(engine), job["model"], job["min_rows"], stop)
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()

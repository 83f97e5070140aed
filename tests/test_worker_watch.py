"""``WorkerWatch``: a watched thread that died is started again and told as ``restarted``
for a minute; one that keeps dying is left dead and told as ``dead``; nothing is started
after ``forget`` (the runtime stopping its workers). Real threads, a clock of the test's."""

from __future__ import annotations

import threading

import pytest

from memstrata.logs import event_fields
from memstrata.worker_watch import (
    RESTARTED_SHOWN_S,
    RESTARTS_MOST,
    RESTARTS_WINDOW_S,
    BackgroundHealth,
    WorkerWatch,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Worker:
    """A thread that runs until told to end, or dies at once when ``dies`` is set."""

    def __init__(self) -> None:
        self.dies = False
        self.starts = 0
        self._end = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.starts += 1
        self._end.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if self.dies:
            self._thread.join(5)

    def _run(self) -> None:
        if not self.dies:
            self._end.wait()

    def kill(self) -> None:
        self._end.set()
        assert self._thread is not None
        self._thread.join(5)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def test_a_dead_worker_is_restarted_and_told_for_a_while() -> None:
    clock, worker = Clock(), Worker()
    watch = WorkerWatch(clock=clock)
    worker.start()
    watch.watch("w", lambda: worker.running, worker.start)
    assert watch.check() is None
    worker.kill()
    assert watch.check() == BackgroundHealth("restarted", ("w",))
    assert worker.running and worker.starts == 2
    clock.now += RESTARTED_SHOWN_S + 1
    assert watch.check() is None
    worker.kill()


def test_a_worker_that_keeps_dying_is_left_dead(caplog: pytest.LogCaptureFixture) -> None:
    clock, worker = Clock(), Worker()
    watch = WorkerWatch(clock=clock)
    worker.dies = True
    watch.watch("w", lambda: worker.running, worker.start)
    with caplog.at_level("ERROR", logger="memstrata"):
        for _ in range(RESTARTS_MOST):
            assert watch.check() == BackgroundHealth("restarted", ("w",))
            clock.now += 1
        assert watch.check() == BackgroundHealth("dead", ("w",))
        assert watch.check() == BackgroundHealth("dead", ("w",))  # and not started again
    assert worker.starts == RESTARTS_MOST
    events = [r.msg for r in caplog.records]
    assert events == ["runtime.worker_died"] * RESTARTS_MOST + ["runtime.worker_dead"]
    dead = event_fields(caplog.records[-1])
    assert (dead["worker"], dead["deaths"]) == ("w", RESTARTS_MOST + 1)


def test_deaths_far_apart_are_each_restarted() -> None:
    clock, worker = Clock(), Worker()
    watch = WorkerWatch(clock=clock)
    worker.dies = True
    watch.watch("w", lambda: worker.running, worker.start)
    for _ in range(RESTARTS_MOST * 2):
        assert watch.check() == BackgroundHealth("restarted", ("w",))
        clock.now += RESTARTS_WINDOW_S / RESTARTS_MOST + 1


def test_nothing_is_started_after_forget() -> None:
    worker = Worker()
    watch = WorkerWatch()
    watch.watch("w", lambda: worker.running, worker.start)
    watch.forget()
    assert watch.check() is None
    assert worker.starts == 0

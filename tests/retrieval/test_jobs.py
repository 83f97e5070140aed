"""KeyedJobs: one pending job per key, work submitted during a run is not lost, errors go
to the handler and the thread keeps going."""

from __future__ import annotations

import threading

from memstrata.retrieval.jobs import KeyedJobs


def test_one_pending_job_per_key_and_none_lost_while_running() -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[tuple[str, int]] = []

    def run(key: str, payload: int) -> None:
        ran.append((key, payload))
        if payload == 1:
            started.set()
            release.wait(5)

    jobs: KeyedJobs[str, int] = KeyedJobs("test-jobs", run, lambda k, e: None)
    assert jobs.submit("a", 1)
    assert started.wait(5)
    # "a" is running, not pending: new work for it queues one more job, and only one.
    assert jobs.submit("a", 2)
    assert not jobs.submit("a", 3)
    assert jobs.submit("b", 4)
    assert not jobs.idle(timeout=0.05)  # still running
    release.set()
    assert jobs.idle()
    assert ran == [("a", 1), ("a", 2), ("b", 4)]
    jobs.close()


def test_an_error_goes_to_the_handler_and_the_next_job_runs() -> None:
    errors: list[tuple[str, str]] = []
    ran: list[str] = []

    def run(key: str, _: None) -> None:
        if key == "bad":
            raise OSError("broken")
        ran.append(key)

    def failed(key: str, exc: Exception) -> None:
        errors.append((key, str(exc)))

    jobs: KeyedJobs[str, None] = KeyedJobs("test-jobs", run, failed)
    jobs.submit("bad", None)
    jobs.submit("good", None)
    assert jobs.idle()
    assert errors == [("bad", "broken")] and ran == ["good"]
    jobs.close()
    jobs.close()  # twice is fine

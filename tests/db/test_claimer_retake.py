"""The re-embedding worker's lock after its connection ended: taken again at the next round
when it had been held a while (a database restart), after ``RETAKE_S`` when it was lost
right after it was taken (a pooler that drops it after every statement). Before, each
restart left the worker's claims on their lease alone for 30 s
(``embedding.heal.claimer_lost``)."""

from __future__ import annotations

from memstrata.db.database import Database
from memstrata.retrieval import claimer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_lock_held_a_while_then_lost_is_taken_again_at_once(db: Database) -> None:
    clock = Clock()
    lock = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine), clock)
    lock.open()
    try:
        first = lock.token()
        assert first is not None
        clock.now += claimer.RETAKE_S + 1  # held since: a restart ended it, not a pooler
        lock.lost()
        second = lock.token()
        assert second is not None and second != first
    finally:
        lock.close()


def test_a_lock_lost_right_after_it_was_taken_waits_the_retry_pause(db: Database) -> None:
    clock = Clock()
    lock = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine), clock)
    lock.open()
    try:
        assert lock.token() is not None
        clock.now += 1.0
        lock.lost()
        assert lock.token() is None
        clock.now += claimer.RETAKE_S
        assert lock.token() is not None
    finally:
        lock.close()

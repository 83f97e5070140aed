"""The worker's one slow text gives the passage slot back between its tries, and its log
line names the users whose text it is.

A text slower than its timeout is sent again with the timeout doubled, up to 4 times the
base (``embedding_slow``): 1 + 2 + 4 timeouts, 42 s with the defaults. Before, the whole
chain held the passage slot, and another user's write waiting for it gave up after
``MEMSTRATA_EMBEDDING_BULK_WAIT_S`` and stored its text without a vector. The fake of
``fault_server.py`` in its ``slow-by-length`` mode injects the slowness: the worker's long
text outlasts twice its timeout, the other user's short one answers at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.breaker import CircuitBreaker, bulk_owner
from memstrata.retrieval.embedding_provider import Embedded
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer

from .fault_server import FaultServer
from .healing_support import deferred, vectors

pytestmark = pytest.mark.timeout(60)

BASE_S = 0.4
PER_TEXT_S = 0.05
ONE_TEXT_S = BASE_S + PER_TEXT_S
# The worker's text: one chunk of 490 characters, answered after 2.9 x its timeout
# (between the 2x and the 4x try); the write's: a few characters, answered at once.
LONG_TEXT = "garden " * 70
DELAY_PER_1000_S = ONE_TEXT_S * 2.9 / (len(LONG_TEXT) / 1000)
BULK_WAIT_S = 0.6  # over one worker's try, well under the chain's 1 + 2 + 2.9 timeouts


@pytest.fixture
def slow(fault: FaultServer) -> Iterator[OpenAICompatibleEmbedder]:
    fault.mode, fault.delay_s = "slow-by-length", DELAY_PER_1000_S
    with OpenAICompatibleEmbedder(
        EmbeddingModelSpec(name="fake-model", base_url=fault.base_url),
        max_retries=0,
        breaker=CircuitBreaker(threshold=2, cooldown_s=0.2),
        timeout_s=BASE_S,
        timeout_per_text_s=PER_TEXT_S,
        bulk_wait_s=BULK_WAIT_S,
    ) as e:
        yield e


def wait_for_requests(fault: FaultServer, n: int) -> None:
    end = time.monotonic() + 5
    while len(fault.requests) < n:
        assert time.monotonic() < end, "the worker's request never arrived"
        time.sleep(0.005)


def test_another_users_write_goes_between_the_workers_tries(
    fault: FaultServer, slow: OpenAICompatibleEmbedder
) -> None:
    worker: list[Embedded] = []
    ended: dict[str, float] = {}

    def background() -> None:
        worker.extend(slow.embed_each([LONG_TEXT], "passage", split_slow=True))
        ended["worker"] = time.monotonic()

    thread = threading.Thread(target=background)
    thread.start()
    wait_for_requests(fault, 1)  # the worker's first try is in flight, holding the slot
    began = time.monotonic()
    with bulk_owner("bob"):
        (write,) = slow.embed_each(["bob's short turn"], "passage")
    ended["write"] = time.monotonic()
    thread.join(30)
    # Before: the write waited BULK_WAIT_S for the slot the chain held, then deferred.
    assert isinstance(write, list), write
    assert ended["write"] - began < BULK_WAIT_S
    assert ended["write"] < ended["worker"]
    (vector,) = worker
    assert isinstance(vector, list)  # the worker's text still got its vector, at 4x
    assert slow.background_fit.stretch == 4
    assert not slow.circuit_open and slow.breaker.failures == 0
    sizes = [r.body["input"] for r in fault.requests]
    assert sizes[:2] == [[LONG_TEXT], ["bob's short turn"]], sizes


def test_the_slow_log_line_names_the_users_of_the_text(
    db: Database,
    fault: FaultServer,
    slow: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    deferred(db, slow, "alice", 1, LONG_TEXT + "{}")
    healer = VectorHealer(db.sessions, slow, batch=8, interval_s=0.05)
    with caplog.at_level("WARNING", logger="memstrata.retrieval"):
        assert healer.run_once().embedded == 1
    told = [event_fields(r) for r in caplog.records if r.msg == "embedding.slow"]
    assert [t["users"] for t in told] == [["alice"], ["alice"]]  # the 2x try, the 4x
    assert [t["timeout_s"] for t in told] == [round(ONE_TEXT_S * 2, 1), round(ONE_TEXT_S * 4, 1)]
    assert all(has for _, _, has, _, _ in vectors(db))

"""``close()`` while the re-embedding worker is inside an embedding call.

Before, ``stop_background()`` waited 2 s for the worker, then ``close()`` closed the HTTP
client under the call still running: the worker's next request raised ``RuntimeError:
Cannot send a request, as the client has been closed.``, logged as
``embedding.heal.crashed`` at ERROR with a traceback (and with a client of the caller's,
which ``close()`` leaves open, the worker went on sending the rest of its claim). Now
``close()`` first stops passage requests, so the call ends with the request in flight; a
round cut off anyway is the worker's end, logged at INFO; the rows wait, unclaimed, for
the next worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import Round
from memstrata.runtime import HEALER_STOP_S, Memstrata, drain_timeout_s
from tests.retrieval.fault_server import FaultServer

USER = "close-mid-call"
# Per text: a request of 8 texts (the default batch) takes 0.8 s, and a claim of 32 rows
# four of them, so the worker is still in its claim when close() has waited 2 s for it.
DELAY_S = 0.1
ROUNDS = [Round("import", i, f"line {i} of the import", "", None) for i in range(200)]


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def _healer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "memstrata-healer"]


def _slow_and_called(fault: FaultServer, start: Callable[[], object]) -> None:
    """Make the API slow, run ``start``, and return once a passage request reached it."""
    fault.delay_s = DELAY_S
    fault.mode = "slow"
    before = len(fault.requests)
    start()
    deadline = time.monotonic() + 10
    while len(fault.requests) == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(fault.requests) > before, "the worker never called the API"


def _waiting_rows(db: Database) -> tuple[int, int]:
    """Rows of ``USER`` without a vector, and of those the ones still claimed."""
    with db.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*), count(*) FILTER (WHERE embedding_claimed_until > now()) "
                "FROM memory_embeddings WHERE user_id = :u AND embedding IS NULL"
            ),
            {"u": USER},
        ).one()
    return int(row[0]), int(row[1])


def _loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.timeout(120)
def test_close_during_a_workers_embedding_call_is_a_quiet_stop(
    db: Database, settings: Settings, fault: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings.model_copy(
        update={"embedding_base_url": fault.base_url, "embedding_model": "fake-model"}
    )
    mem = Memstrata.open(settings, database=db)
    mem.start_background()
    with caplog.at_level(logging.DEBUG, logger="memstrata"):
        _slow_and_called(fault, lambda: mem.import_rounds(USER, ROUNDS, background=True))
        began = time.monotonic()
        mem.close()
        closed_in = time.monotonic() - began
        for thread in _healer_threads():  # a daemon: ends with its request in flight
            thread.join(drain_timeout_s(settings))
    assert closed_in < HEALER_STOP_S + 1.5, closed_in
    assert _healer_threads() == []
    assert _loud(caplog) == []
    waiting, claimed = _waiting_rows(db)
    assert waiting > 0 and claimed == 0, (waiting, claimed)


@pytest.mark.timeout(120)
def test_close_stops_a_worker_on_the_callers_client_after_its_request_in_flight(
    db: Database, settings: Settings, fault: FaultServer
) -> None:
    """``close()`` leaves a client of the caller's open: the worker must not go on sending
    the rest of its claim on it after the runtime is closed."""
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    with httpx.Client() as client:
        mem = Memstrata.open(
            settings, database=db, embedder=OpenAICompatibleEmbedder(spec, client=client)
        )
        mem.start_background()
        _slow_and_called(fault, lambda: mem.import_rounds(USER, ROUNDS, background=True))
        at_close = len(fault.requests)
        mem.close()
        for thread in _healer_threads():
            thread.join(drain_timeout_s(settings))
        assert _healer_threads() == []
        # At most one: the worker may have passed the lane just before close() began.
        assert len(fault.requests) - at_close <= 1, len(fault.requests) - at_close


@pytest.mark.timeout(120)
def test_a_worker_whose_client_is_closed_under_its_call_stops_quietly(
    db: Database, fault: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker alone, its client closed under a call that outlived ``stop()``'s wait
    (a host that closes the embedder itself): an INFO line, no ERROR, the rows given
    back."""
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    embedder = OpenAICompatibleEmbedder(spec)
    healer = VectorHealer(db.sessions, embedder, interval_s=0.05)
    healer.start()

    def import_deferred() -> None:
        Indexer(db.sessions, embedder).index_rounds(USER, ROUNDS, embed=False)
        healer.wake()

    with caplog.at_level(logging.DEBUG, logger="memstrata"):
        _slow_and_called(fault, import_deferred)
        healer.stop(timeout_s=0.05)
        embedder.close()
        for thread in _healer_threads():
            thread.join(drain_timeout_s(Settings(environment="test")))
    assert _healer_threads() == []
    assert _loud(caplog) == []
    stopped = [r for r in caplog.records if r.getMessage() == "embedding.heal.stopped_mid_call"]
    assert [r.levelno for r in stopped] == [logging.INFO]
    waiting, claimed = _waiting_rows(db)
    assert waiting > 0 and claimed == 0, (waiting, claimed)

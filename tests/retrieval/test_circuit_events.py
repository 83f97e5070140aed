"""An embedding outage is told from its start to its end (the operator review's M6).

``embedding.circuit_open`` was logged once, when the circuit opened; then nothing, however
long the outage (40 s of silence in the review), and no line when it ended. Now
``embedding.still_failing`` comes once a period while it lasts and
``embedding.circuit_closed`` (with how long it was open) when an answer closes it; and the
background worker probes an open circuit when it has nothing to embed, so the circuit
closes, and ``/readyz`` says so, once the API is back without waiting for traffic. The
faults come from the fake in ``fault_server.py``; the breaker's periods from a fake clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.errors import EmbeddingError
from memstrata.logs import event_fields
from memstrata.retrieval import embedding_circuits
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer

from .fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)

COOLDOWN_S = 0.1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    with FaultServer("500") as server:
        yield server


@pytest.fixture
def embedder(fault: FaultServer) -> Iterator[OpenAICompatibleEmbedder]:
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    breaker = CircuitBreaker(threshold=2, cooldown_s=COOLDOWN_S)
    with OpenAICompatibleEmbedder(spec, max_retries=0, breaker=breaker) as e:
        yield e


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [f for f in map(event_fields, caplog.records) if f.get("event") == name]


def fail(embedder: OpenAICompatibleEmbedder, times: int = 1) -> None:
    for _ in range(times):
        with contextlib.suppress(EmbeddingError):
            embedder.embed(["hello"], "passage")


def test_the_breaker_says_how_long_it_was_open_and_when_a_notice_is_due() -> None:
    clock = Clock()
    breaker = CircuitBreaker(threshold=2, cooldown_s=5.0, clock=clock)
    assert breaker.record_success() is None  # closed: nothing ended
    breaker.record_failure(RuntimeError("one"))
    assert breaker.still_failing_due(60) is None  # not open yet
    clock.now = 10.0
    assert breaker.record_failure(RuntimeError("two")) is True
    assert str(breaker.last_failure) == "two"
    clock.now = 40.0
    assert breaker.still_failing_due(60) is None
    clock.now = 70.0
    assert breaker.still_failing_due(60) == 60.0  # open since 10
    assert breaker.still_failing_due(60) is None  # once per period
    clock.now = 100.0
    assert breaker.record_failure() is False  # a failed probe: open again, same outage
    clock.now = 130.0
    assert breaker.still_failing_due(60) == 120.0
    clock.now = 135.5
    assert breaker.record_success() == 125.5  # the whole outage, not the last cool-down
    assert breaker.still_failing_due(60) is None and breaker.last_failure is None


def test_an_outage_is_told_while_it_lasts_and_when_it_ends(
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedding_circuits, "STILL_FAILING_EVERY_S", 0.3)
    with caplog.at_level("INFO", logger="memstrata.retrieval.embeddings"):
        fail(embedder, 2)  # opens
        assert len(events(caplog, "embedding.circuit_open")) == 1
        fail(embedder, 5)  # refused by the open circuit at once: within the first period
        assert events(caplog, "embedding.still_failing") == []
        time.sleep(0.35)
        fail(embedder, 3)  # a failed probe after the cool-down, then refusals
        (still,) = events(caplog, "embedding.still_failing")
        assert still["model"] == "fake-model" and still["kind"] == "passage"
        assert str(still["url"]).startswith(fault.base_url)
        assert float(str(still["open_s"])) >= 0.3
        assert "HTTP 500" in str(still["error"])
        fault.mode = "ok"
        time.sleep(COOLDOWN_S + 0.05)
        embedder.embed(["hello"], "passage")  # the probe closes it
    (closed,) = events(caplog, "embedding.circuit_closed")
    assert closed["model"] == "fake-model" and closed["kind"] == "passage"
    assert float(str(closed["open_s"])) >= 0.35
    assert embedder.breaker.state == "closed"


def test_the_worker_probes_an_open_circuit_when_it_has_nothing_to_embed(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Searches opened the circuit, then the API came back and nobody searched: the
    circuit stayed open, and ``/readyz`` degraded, until the next request."""
    fail(embedder, 2)  # the API fails (the fixture's fake answers 500)
    assert embedder.circuit_open
    fault.mode = "ok"
    healer = VectorHealer(db.sessions, embedder)
    assert healer.run_once().claimed == 0  # within the cool-down: not asked
    assert embedder.circuit_open
    time.sleep(COOLDOWN_S + 0.05)
    with caplog.at_level("INFO", logger="memstrata.retrieval.embeddings"):
        assert healer.run_once().claimed == 0  # nothing to embed: the probe text
    assert not embedder.circuit_open
    assert len(events(caplog, "embedding.circuit_closed")) == 1
    asked = len(fault.requests)
    assert healer.run_once().claimed == 0  # closed and answered: no more probes
    assert len(fault.requests) == asked


def test_a_refusal_of_the_open_circuit_names_the_outages_cause(
    fault: FaultServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told by a request the open circuit refused unsent, ``embedding.still_failing`` had
    no ``error`` (seen in the rolling-restart drill): the last failure's is given."""
    monkeypatch.setattr(embedding_circuits, "STILL_FAILING_EVERY_S", 0.1)
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    breaker = CircuitBreaker(threshold=2, cooldown_s=30.0)  # no probe within the test
    with (
        OpenAICompatibleEmbedder(spec, max_retries=0, breaker=breaker) as embedder,
        caplog.at_level("INFO", logger="memstrata.retrieval.embeddings"),
    ):
        fail(embedder, 2)  # opens
        asked = len(fault.requests)
        time.sleep(0.15)  # a notice is due
        fail(embedder)  # refused by the open circuit, not sent
        assert len(fault.requests) == asked
        (still,) = events(caplog, "embedding.still_failing")
    assert "HTTP 500" in str(still["error"])

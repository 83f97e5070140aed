"""The worker's start-up probe when the runtime closes under it.

``close()`` within a couple of seconds of a start, while the embedding API hangs, closed
the HTTP client under the probe in flight: its retry raised httpx's ``RuntimeError``
("the client has been closed") and the worker logged ``embedding.heal.crashed`` with a
traceback — a bug report for an ordinary shutdown. A probe that fails because its client
was closed says nothing: nobody is left to act on it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from memstrata.config_embedding import EmbeddingModelSpec
from memstrata.retrieval.api_probe import ApiProbe
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder


@pytest.fixture
def hanging_api() -> Iterator[str]:
    """A base URL whose server accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    server.close()
    for conn in held:
        conn.close()


def test_a_probe_whose_client_closes_under_it_logs_nothing(
    hanging_api: str, caplog: pytest.LogCaptureFixture
) -> None:
    spec = EmbeddingModelSpec(name="hangs", base_url=hanging_api, dimensions=8)
    embedder = OpenAICompatibleEmbedder(spec, timeout_s=3.0, max_retries=2)
    probe = ApiProbe(embedder)
    caplog.set_level(logging.INFO, logger="memstrata")
    worker = threading.Thread(target=probe.at_start)
    worker.start()
    time.sleep(0.5)  # the probe's request is in flight

    embedder.close()
    worker.join(20)

    assert not worker.is_alive()
    assert probe.settled.is_set()
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert logged == [], logged


def test_a_probe_of_an_api_that_hangs_still_warns_while_open(
    hanging_api: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The quiet close is not a quiet failure: with the client open, the same API is told."""
    spec = EmbeddingModelSpec(name="hangs", base_url=hanging_api, dimensions=8)
    with OpenAICompatibleEmbedder(spec, timeout_s=0.2, max_retries=0) as embedder:
        caplog.set_level(logging.INFO, logger="memstrata")
        ApiProbe(embedder).at_start()
    # It accepted the connection and never answered: told as too slow (the URL is right).
    assert "embedding.slow_at_start" in [r.getMessage() for r in caplog.records]

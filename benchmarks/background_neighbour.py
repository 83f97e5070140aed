"""Another user's searches while one user imports with ``embed: inline`` vs ``embed:
background``: real ``memstrata serve``, the local embedding servers, same run.

    .venv/bin/python benchmarks/background_neighbour.py PATH/TO/locomo-dev.json --rounds 3

User S (10k rows, index loaded) searches every 50 ms. A fresh user W sends ``TURNS`` LoCoMo
turns in one batch request, alternating the two modes each round. "During" is S's round
trips from W's request until W's last vector is stored — the inline request's own
duration, or, in the background mode, until ``/metrics`` reports no row waiting; "idle" is
30 searches before. The run stops without figures if W's rows were not all embedded.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from memstrata.bench.http_common import (
    _batches,
    _search,
    _server,
    _stats,
    _token,
    locomo_texts,
    pending_vectors,
)
from memstrata.bench.latency import _copy_rows, _unit
from memstrata.cli.bench import bench_runtime
from memstrata.runtime import Memstrata

ROWS = 10_000
TURNS = 200
IDLE = 30
PAUSE_S = 0.05  # between S's searches: a busy user, not a flood
BATCH = "/api/memory/conversations/turns:batch"


def one_round(
    mem: Memstrata, mode: str, importer: str, turns: list[str], qs: list[str]
) -> tuple[list[float], list[float], float, float]:
    """S's idle and during samples, W's answer and all-vectors seconds."""
    (batch,) = _batches(turns, len(turns), datetime(2025, 6, 1, tzinfo=UTC))
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-background-") as tmp,
        _server(mem, Path(tmp)) as base,
        httpx.Client(timeout=600) as client,
    ):
        _search(client, base, qs.pop(), "s")  # S's index loaded before anything is timed
        idle = [_search(client, base, qs.pop(), "s")[0] for _ in range(IDLE)]
        times: list[float] = []

        def send() -> None:
            with httpx.Client(timeout=600) as own:  # a client is not shared across threads
                began = time.monotonic()
                r = own.post(
                    f"{base}{BATCH}", json={**batch, "embed": mode}, headers=_token(importer)
                )
                body = r.json()
                stored = body.get("embedded", 0) + body.get("deferred", 0)
                if r.status_code != 200 or stored != len(turns):
                    raise SystemExit(f"W's import failed: {r.status_code} {r.text[:200]}")
                times.append(time.monotonic() - began)
                while pending_vectors(own, base) != 0:
                    time.sleep(0.1)
                times.append(time.monotonic() - began)

        thread = threading.Thread(target=send)
        thread.start()
        during = []
        while thread.is_alive():
            during.append(_search(client, base, qs.pop(), "s")[0])
            time.sleep(PAUSE_S)
        thread.join()
        if len(times) != 2:
            raise SystemExit("W's import failed; no figures")
        return idle, during, times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    texts, qs = locomo_texts(args.locomo, 8)
    rows = [f"{texts[i % len(texts)]} (#{i})" for i in range(ROWS)]
    results: dict[str, list[tuple[list[float], list[float], float, float]]] = {
        "inline": [],
        "background": [],
    }
    with bench_runtime(None) as mem:
        assert mem.embedder is not None
        start = datetime(2025, 1, 1, tzinfo=UTC)
        vectors = _unit(np.random.default_rng(5), ROWS, 384)
        _copy_rows(mem, ["s"] * ROWS, rows, vectors, start, mem.embedder.name)
        for n in range(args.rounds):
            for mode in ("inline", "background"):
                turns = [f"{t} (round {n} {mode})" for t in texts[n * TURNS : (n + 1) * TURNS]]
                got = one_round(mem, mode, f"w-{n}-{mode}", turns, qs)
                results[mode].append(got)
                idle, during, answered, done = got
                print(
                    f"round {n + 1} {mode:10}: S idle {_stats(idle)}, during {_stats(during)} "
                    f"({len(during)} searches); W answered {answered:.1f} s, "
                    f"all vectors {done:.1f} s",
                    flush=True,
                )
    for mode, got in results.items():
        ratio = [_stats(d)["p95_ms"] / _stats(i)["p95_ms"] for i, d, _, _ in got]
        p50 = statistics.median(_stats(d)["p50_ms"] for _, d, _, _ in got)
        p95 = statistics.median(_stats(d)["p95_ms"] for _, d, _, _ in got)
        answered = statistics.median(a for *_, a, _ in got)
        done = statistics.median(d for *_, d in got)
        print(
            f"{mode}: S during p50 median {p50} ms, p95 median {p95} ms, during/idle p95 "
            f"{[round(r, 2) for r in ratio]} (median {statistics.median(ratio):.2f}); "
            f"W answered {answered:.1f} s, all vectors {done:.1f} s (medians)"
        )


if __name__ == "__main__":
    main()

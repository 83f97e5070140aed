"""Does the index warmer stall other users more than a cold first search would? One
user's searches while another user's import ends, real ``memstrata serve``, same run.

    .venv/bin/python benchmarks/import_neighbour.py PATH/TO/locomo-dev.json --rounds 4

User S (10k rows, index loaded) searches every 50 ms; meanwhile user W (9,900 bulk-copied
rows) sends the last 100 turns of its import through the batch endpoint (real embeddings).
With warming on (the default) the server then loads W's 10k-row index and writes its
snapshot in the background while W stays silent; with
``MEMSTRATA_INDEX_WARM_AFTER_IMPORT=false`` W sends its first search as soon as the batch
is answered, and that search does the same load and the same snapshot write — what a
server without the warmer does once W searches. S's round trips sent in the 5 s after the
batch's answer are the "during" sample (those while the batch is embedded are alike in
both modes and not kept); 30 searches before the batch are "idle". Servers alternate
on/off, a fresh W each round, every question text asked once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np

from memstrata.bench.http_common import _batches, _search, _server, _stats, _token, locomo_texts
from memstrata.bench.latency import _copy_rows, _unit
from memstrata.cli.bench import bench_runtime
from memstrata.runtime import Memstrata

ROWS = 10_000
LAST = 100
AFTER_S = 5.0
IDLE = 30
PAUSE_S = 0.05  # between S's searches: a busy user, not a flood


def one_round(
    mem: Memstrata, warming: bool, searcher: str, importer: str, texts: list[str], qs: list[str]
) -> tuple[list[float], list[float], float]:
    extra = {} if warming else {"MEMSTRATA_INDEX_WARM_AFTER_IMPORT": "false"}
    start = datetime(2025, 1, 1, tzinfo=UTC)
    (batch,) = _batches(texts[ROWS - LAST : ROWS], LAST, start + timedelta(minutes=ROWS))
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-neighbour-") as tmp,
        _server(mem, Path(tmp), extra) as base,
        httpx.Client(timeout=600) as client,
    ):
        _search(client, base, qs.pop(), searcher)  # S's index loaded before anything is timed
        idle = [_search(client, base, qs.pop(), searcher)[0] for _ in range(IDLE)]
        answered: list[float] = []

        def send() -> None:
            with httpx.Client(timeout=600) as own:  # a client is not shared across threads
                r = own.post(
                    f"{base}/api/memory/conversations/turns:batch",
                    json=batch,
                    headers=_token(importer),
                )
                if r.status_code != 200 or r.json()["embedded"] != LAST:
                    raise SystemExit(f"the import batch failed or lost vectors: {r.text[:200]}")
                answered.append(time.monotonic())
                if not warming:  # without the warmer, W's first search does the load
                    _search(own, base, qs.pop(0), importer)

        thread = threading.Thread(target=send)
        began = time.monotonic()
        thread.start()
        during = []
        while not answered or time.monotonic() < answered[0] + AFTER_S:
            sent = time.monotonic()
            elapsed = _search(client, base, qs.pop(), searcher)[0]
            if answered and sent >= answered[0]:
                during.append(elapsed)  # after the batch's answer: when the warmer works
            time.sleep(PAUSE_S)
            if not thread.is_alive() and not answered:
                raise SystemExit("the import batch failed")
        thread.join()
        return idle, during, answered[0] - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    turns, qs = locomo_texts(args.locomo, 4)
    texts = [f"{turns[i % len(turns)]} (#{i})" for i in range(ROWS)]
    rng = np.random.default_rng(5)
    results: dict[bool, list[tuple[list[float], list[float], float]]] = {True: [], False: []}
    with bench_runtime(None) as mem:
        assert mem.embedder is not None
        start = datetime(2025, 1, 1, tzinfo=UTC)
        _copy_rows(mem, ["s"] * ROWS, texts, _unit(rng, ROWS, 384), start, mem.embedder.name)
        for n in range(args.rounds):
            for warming in (True, False):
                importer = f"w-{n}-{'on' if warming else 'off'}"
                size = ROWS - LAST
                vectors = _unit(rng, size, 384)
                _copy_rows(mem, [importer] * size, texts[:size], vectors, start, mem.embedder.name)
                got = one_round(mem, warming, "s", importer, texts, qs)
                results[warming].append(got)
                idle, during, batch_s = got
                print(
                    f"round {n + 1} warming {'on ' if warming else 'off'}: idle {_stats(idle)}, "
                    f"during {_stats(during)} ({len(during)} searches), batch {batch_s:.1f} s",
                    flush=True,
                )
    for warming in (True, False):
        rows = results[warming]
        ratio = [_stats(d)["p95_ms"] / _stats(i)["p95_ms"] for i, d, _ in rows]
        p50 = [_stats(d)["p50_ms"] for _, d, _ in rows]
        p95 = [_stats(d)["p95_ms"] for _, d, _ in rows]
        print(
            f"warming {'on ' if warming else 'off'}: during p50 median {statistics.median(p50)} "
            f"ms, p95 median {statistics.median(p95)} ms, during/idle p95 "
            f"{[round(r, 2) for r in ratio]} (median {statistics.median(ratio):.2f})"
        )


if __name__ == "__main__":
    main()

"""How long a full garbage collection stops a server process, with and without the
start-up freeze of ``memstrata serve`` (``cli.serve.freeze_startup_heap``).

    .venv/bin/python benchmarks/gc_pause.py --repeats 7

Builds what ``memstrata serve`` builds — the runtime (embedded PostgreSQL in a temporary
data directory, no embedding API), the app, its lifespan started by a test client, a few
requests — and times ``gc.collect()`` (a full collection: what Python runs now and then
by itself, in whichever request thread allocates at that moment; no other thread runs
meanwhile). Then the same after the freeze, and after a 10k-row user's index was loaded
(objects made after start-up stay in the collector's walks). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_runtime


def _full_collection_ms(repeats: int) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        gc.collect()
        samples.append((time.perf_counter() - began) * 1000)
    return {
        "tracked_objects": len(gc.get_objects()),
        "frozen_objects": gc.get_freeze_count(),
        "median_ms": round(statistics.median(samples), 2),
        "max_ms": round(max(samples), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chunks", type=int, default=10_000)
    args = parser.parse_args()
    from fastapi.testclient import TestClient

    from memstrata.api.app import create_app
    from memstrata.bench import latency as synthetic
    from memstrata.cli.serve import freeze_startup_heap

    with (
        scratch_runtime("memstrata-gc-") as mem,
        TestClient(create_app(mem.settings, memstrata=mem)) as client,
    ):
        for path in ("/healthz", "/readyz", "/openapi.json", "/metrics"):
            client.get(path)
        result: dict[str, object] = {"as_started": _full_collection_ms(args.repeats)}
        freeze_startup_heap()
        result["frozen"] = _full_collection_ms(args.repeats)
        rng = np.random.default_rng(3)
        texts = synthetic._sentences(rng, synthetic._vocabulary(rng), args.chunks)
        user = "gc-user"
        synthetic._copy_rows(
            mem, [user] * args.chunks, texts, synthetic._unit(rng, args.chunks, 384),
            datetime(2026, 1, 1, tzinfo=UTC),
        )  # fmt: skip
        mem.search.search(user, "anything at all")  # loads the index (BM25 only)
        if len(mem.search.cache.get(user, None).rows) != args.chunks:
            raise SystemExit("the user's index was not loaded; no figures")
        result[f"frozen_with_{args.chunks}_rows_loaded"] = _full_collection_ms(args.repeats)
        gc.unfreeze()
        result[f"as_started_with_{args.chunks}_rows_loaded"] = _full_collection_ms(args.repeats)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

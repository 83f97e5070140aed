"""Cold load of one user's index (10k rows) in a process that already holds other users'
indexes, with cyclic garbage collection paused during the load (what ``IndexCache`` does)
and not paused, alternating, same run.

    .venv/bin/python benchmarks/cold_load_gc.py --chunks 10000 --others 3 --repeats 7

Uses the embedded PostgreSQL in a temporary data directory and the synthetic rows of
``memstrata bench latency``, no embedding API (vectors are written directly).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=3, help="users already in memory")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstrata-cold-gc-") as tmp:
        os.environ.update(
            MEMSTRATA_DATA_DIR=tmp,
            MEMSTRATA_LOG_LEVEL="WARNING",
            MEMSTRATA_EMBEDDING_AUTOSTART="false",
        )
        from memstrata.bench import latency as synthetic
        from memstrata.config import Settings
        from memstrata.retrieval import cache as cache_module
        from memstrata.retrieval.cache import IndexCache
        from memstrata.retrieval.search import SearchService
        from memstrata.runtime import Memstrata

        paused = cache_module._cyclic_gc_paused
        mem = Memstrata.open(Settings())
        try:
            rng = np.random.default_rng(7)
            vocab = synthetic._vocabulary(rng)
            texts = synthetic._sentences(rng, vocab, args.chunks)
            vectors = synthetic._unit(rng, args.chunks, 384)
            users = [f"user-{i}" for i in range(args.others + 1)]
            for user in users:
                start = datetime(2026, 1, 1, tzinfo=UTC)
                synthetic._copy_rows(mem, [user] * args.chunks, texts, vectors, start)
            query = synthetic._sentences(rng, vocab, 1, 8)[0]
            query_vector = synthetic._unit(rng, 1, 384)[0]
            wall: dict[str, list[float]] = {"not paused": [], "paused": []}
            for _ in range(args.repeats):
                for mode in wall:
                    search = SearchService(IndexCache(mem.db.sessions), synthetic._NamedOnly())
                    cache_module._cyclic_gc_paused = contextlib.nullcontext  # type: ignore[assignment]
                    for other in users[:-1]:  # the server's other users, loaded as before
                        search.search_with_vector(other, query, query_vector, top_k=10)
                    if mode == "paused":
                        cache_module._cyclic_gc_paused = paused
                    began = time.perf_counter()
                    search.search_with_vector(users[-1], query, query_vector, top_k=10)
                    wall[mode].append((time.perf_counter() - began) * 1000)
                    cache_module._cyclic_gc_paused = paused
            for mode, values in wall.items():
                print(
                    f"{mode}: median {statistics.median(values):.0f} ms over {len(values)} "
                    f"cold loads ({', '.join(f'{v:.0f}' for v in values)})"
                )
        finally:
            mem.close()


if __name__ == "__main__":
    main()

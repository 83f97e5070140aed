"""Cold load of one user's index (10k rows) in a process that already holds other users'
indexes, with cyclic garbage collection paused during the load (what ``IndexCache`` does)
and not paused, alternating, same run.

    .venv/bin/python benchmarks/cold_load_gc.py --chunks 10000 --others 3 --repeats 7

Same synthetic rows and embedded PostgreSQL as ``benchmarks/cold_load.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cold_load import synthetic_users


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=3, help="users already in memory")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--after", type=int, default=20, help="warm searches timed after it")
    args = parser.parse_args()
    users = [f"user-{i}" for i in range(args.others + 1)]
    with synthetic_users(users, args.chunks) as data:
        from memstrata.retrieval import cache as cache_module

        paused = cache_module.cyclic_gc_paused
        wall: dict[str, list[float]] = {"not paused": [], "paused": []}
        after: dict[str, list[float]] = {"not paused": [], "paused": []}
        try:
            for _ in range(args.repeats):
                for mode in wall:
                    search = data.fresh_search()
                    # The server's other users, loaded as before this change.
                    cache_module.cyclic_gc_paused = contextlib.nullcontext  # type: ignore[assignment]
                    for other in users[:-1]:
                        search.search_with_vector(other, data.query, data.query_vector, top_k=10)
                    if mode == "paused":
                        cache_module.cyclic_gc_paused = paused
                    began = time.perf_counter()
                    search.search_with_vector(users[-1], data.query, data.query_vector, top_k=10)
                    wall[mode].append((time.perf_counter() - began) * 1000)
                    # A collection deferred by the pause would land in the searches after
                    # it: time them too, so a cost moved is not counted as a cost saved.
                    began = time.perf_counter()
                    for _ in range(args.after):
                        search.search_with_vector(
                            users[-1], data.query, data.query_vector, top_k=10
                        )
                    after[mode].append((time.perf_counter() - began) * 1000)
        finally:
            cache_module.cyclic_gc_paused = paused
        for mode, values in wall.items():
            print(
                f"{mode}: median {statistics.median(values):.0f} ms over {len(values)} "
                f"cold loads ({', '.join(f'{v:.0f}' for v in values)}); the "
                f"{args.after} searches after each: median {statistics.median(after[mode]):.0f} "
                f"ms in all ({', '.join(f'{v:.0f}' for v in after[mode])})"
            )


if __name__ == "__main__":
    main()

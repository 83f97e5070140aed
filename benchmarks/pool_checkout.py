"""What counting a checkout's wait costs: a checkout and return of a real connection from a
SQLAlchemy ``QueuePool`` against the same from ``db.pool_watch.WatchedPool`` (the pool
``db.engine.make_engine`` builds), alternating, on one embedded PostgreSQL.

    .venv/bin/python benchmarks/pool_checkout.py --rounds 7 --checkouts 20000

Each pool holds one open connection, so every checkout finds it idle: the path every
request takes while the pool is not full (a wait is timed only when it is, and then the
wait dwarfs the count). No ``pool_pre_ping``: make_engine's ping is a round trip to the
server on each checkout, the same for both pools, which would hide the difference.
Prints each round, then one JSON line: the median of the rounds, in µs per checkout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import Pool, QueuePool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_runtime
from memstrata.db.pool_watch import WatchedPool


def per_checkout_us(pool: Pool, checkouts: int) -> float:
    """Microseconds per checkout and return of ``pool``'s idle connection."""
    began = time.perf_counter()
    for _ in range(checkouts):
        pool.connect().close()
    return (time.perf_counter() - began) / checkouts * 1e6


def engine(url: str, poolclass: type[Pool]) -> Engine:
    made = create_engine(url, poolclass=poolclass, pool_size=5, max_overflow=10)
    made.pool.connect().close()  # the connection opened, then idle in the pool
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--checkouts", type=int, default=20_000)
    args = parser.parse_args()
    with scratch_runtime("memstrata-pool-checkout-") as mem:
        url = mem.db.engine.url.render_as_string(hide_password=False)
        engines = {"queue_pool": engine(url, QueuePool), "watched_pool": engine(url, WatchedPool)}
        try:
            for made in engines.values():  # warm up the code paths
                per_checkout_us(made.pool, args.checkouts // 10)
            rounds: dict[str, list[float]] = {name: [] for name in engines}
            for i in range(args.rounds):
                order = list(engines) if i % 2 == 0 else list(reversed(engines))
                for name in order:
                    rounds[name].append(per_checkout_us(engines[name].pool, args.checkouts))
                print(f"round {i + 1}: " + ", ".join(f"{n} {rounds[n][-1]:.2f} µs" for n in rounds))
        finally:
            for made in engines.values():
                made.dispose()
    medians = {name: round(statistics.median(values), 3) for name, values in rounds.items()}
    added = [w - q for q, w in zip(rounds["queue_pool"], rounds["watched_pool"], strict=True)]
    print(
        json.dumps(
            {
                "checkouts_per_round": args.checkouts,
                "rounds": args.rounds,
                "median_us": medians,
                "added_us_median": round(statistics.median(added), 3),
            }
        )
    )


if __name__ == "__main__":
    main()

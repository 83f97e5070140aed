"""One user's big write vs another user's searches, against a real ``memstrata serve``
with the local embedding server.

    .venv/bin/python benchmarks/noisy_neighbour.py --searches 40 --kib 256

Prints user B's search latency idle and while user A PUTs a ``--kib`` KiB MEMORY.md (about
one chunk per 1.1 KiB, all embedded), and their p95 ratio (target: ≤ 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import FILE, memstrata_serve, token


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=40)
    parser.add_argument("--kib", type=int, default=256)
    parser.add_argument(
        "--server-threads", type=int, default=None, help="MEMSTRATA_EMBEDDING_SERVER_THREADS"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstrata-noisy-") as tmp:
        data = Path(tmp)
        with (
            memstrata_serve(data, passage_threads=args.server_threads) as url,
            httpx.Client(base_url=url, timeout=600) as client,
        ):
            a = {"Authorization": f"Bearer {token(data, 'user-a')}"}
            b = {"Authorization": f"Bearer {token(data, 'user-b')}"}
            client.put(FILE, headers=b, json={"content": "B likes oolong tea and lakes."})

            asked = [0]

            def search() -> float:
                # A new query each time: the server's query-embedding cache would otherwise
                # answer every search after the first without touching the embedding server.
                asked[0] += 1
                query = f"tea number {asked[0]}"
                started = time.monotonic()
                client.post("/api/memory/search", headers=b, json={"query": query})
                return time.monotonic() - started

            for _ in range(5):
                search()
            idle = [search() for _ in range(args.searches)]
            # Every line distinct, so every chunk is new and embedded.
            lines = (
                f"Meeting {i}: item {i * 7 % 101} moved to room {i % 13}, owner {i % 29}."
                for i in range(args.kib * 40)
            )
            big = "\n".join(lines)[: args.kib * 1024]
            done = threading.Event()
            put_seconds: list[float] = []

            def big_write() -> None:
                started = time.monotonic()
                with httpx.Client(base_url=url, timeout=900) as other:
                    other.put(FILE, headers=a, json={"content": big}).raise_for_status()
                put_seconds.append(time.monotonic() - started)
                done.set()

            writer = threading.Thread(target=big_write)
            writer.start()
            time.sleep(0.5)
            busy = []
            while not done.is_set() and len(busy) < args.searches * 5:
                busy.append(search())
            writer.join(900)
    print(
        f"idle: median {statistics.median(idle) * 1000:.0f} ms, p95 {p95(idle) * 1000:.0f} ms "
        f"({len(idle)} searches)\nduring A's {args.kib} KiB PUT ({put_seconds[0]:.1f} s): "
        f"median {statistics.median(busy) * 1000:.0f} ms, p95 {p95(busy) * 1000:.0f} ms "
        f"({len(busy)} searches)\np95 ratio busy/idle: {p95(busy) / p95(idle):.2f}"
    )


if __name__ == "__main__":
    main()

"""50 If-Match writers on one MEMORY.md against a real ``memstrata serve`` (with the local
embedding server), repeated; prints total seconds and 409 latency, and in the same run the
serial baseline: the same 50 lines written one after another by one client (the floor a
contended run cannot beat: every write embeds its grown chunk).

    .venv/bin/python benchmarks/concurrent_writers.py --runs 3 --writers 50

Each client is its own process, as real clients are; ``--threads`` runs them as threads of
this process instead, where they queue for one interpreter lock and send their requests
late (docs/BENCHMARKS.md shows both).

Target (issue: reliability under load): the run completes in ≤ 15 s with every line
kept, and a 409 answers in ≤ 50 ms p95.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import FILE, memstrata_serve, run_serial, run_writers, token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument(
        "--threads",
        action="store_true",
        help="clients as threads of this process (they then queue for its interpreter lock)",
    )
    parser.add_argument(
        "--server-threads", type=int, default=None, help="MEMSTRATA_EMBEDDING_SERVER_THREADS"
    )
    args = parser.parse_args()
    totals: list[float] = []
    serials: list[float] = []
    conflicts: list[float] = []
    in_app: list[float] = []
    with tempfile.TemporaryDirectory(prefix="memstrata-writers-") as tmp:
        data = Path(tmp)
        started = time.monotonic()
        with memstrata_serve(
            data, embeddings=not args.no_embeddings, passage_threads=args.server_threads
        ) as url:
            print(f"serve ready in {time.monotonic() - started:.1f} s", flush=True)
            for n in range(args.runs):
                run = run_writers(
                    url, data, f"bench-{n}", writers=args.writers, processes=not args.threads
                )
                totals.append(run.seconds)
                conflicts.extend(run.conflicts)
                in_app.extend(run.conflicts_server)
                headers = {"Authorization": f"Bearer {token(data, f'bench-{n}')}"}
                got = httpx.get(f"{url}{FILE}", headers=headers, timeout=60, trust_env=False)
                final = got.json()["content"]
                kept = sum(line in final.splitlines() for line in run.lines)
                kept_text = f"lines kept {kept}/{len(run.lines)}"
                print(f"run {n + 1}: {run.summary()}; {kept_text}", flush=True)
                if kept != len(run.lines) or run.errors:
                    sys.exit(f"run {n + 1} lost lines or failed: {run.errors[:3]}")
                serial = run_serial(url, data, f"serial-{n}", writes=args.writers)
                serials.append(serial.seconds)
                print(f"serial {n + 1}: {serial.summary()}", flush=True)
    total, floor = statistics.median(totals), statistics.median(serials)
    print(
        f"median total {total:.1f} s over {len(totals)} runs; serial baseline {floor:.1f} s "
        f"(contended / serial {total / floor:.2f}); 409 p95 {_p95(conflicts):.0f} ms over "
        f"all runs, of which in the app (Server-Timing) p95 {_p95(in_app):.0f} ms"
    )


def _p95(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[round(0.95 * (len(ordered) - 1))] * 1000 if ordered else 0.0


if __name__ == "__main__":
    main()

"""50 If-Match writers on one MEMORY.md against a real ``memstrata serve`` (with the local
embedding server), repeated; prints total seconds and 409 latency.

    .venv/bin/python benchmarks/concurrent_writers.py --runs 3 --writers 50

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

from tests.reliability.writers import FILE, memstrata_serve, run_writers, token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--no-embeddings", action="store_true")
    args = parser.parse_args()
    totals = []
    with tempfile.TemporaryDirectory(prefix="memstrata-writers-") as tmp:
        data = Path(tmp)
        started = time.monotonic()
        with memstrata_serve(data, embeddings=not args.no_embeddings) as url:
            print(f"serve ready in {time.monotonic() - started:.1f} s", flush=True)
            for n in range(args.runs):
                run = run_writers(url, data, f"bench-{n}", writers=args.writers)
                totals.append(run.seconds)
                headers = {"Authorization": f"Bearer {token(data, f'bench-{n}')}"}
                got = httpx.get(f"{url}{FILE}", headers=headers, timeout=60, trust_env=False)
                final = got.json()["content"]
                kept = sum(line in final.splitlines() for line in run.lines)
                kept_text = f"lines kept {kept}/{len(run.lines)}"
                print(f"run {n + 1}: {run.summary()}; {kept_text}", flush=True)
    print(f"median total {statistics.median(totals):.1f} s over {len(totals)} runs")


if __name__ == "__main__":
    main()

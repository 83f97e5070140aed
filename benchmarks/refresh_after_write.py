"""A search right after a write to the same user's rows, at 10k rows, in process.

    .venv/bin/python benchmarks/refresh_after_write.py --chunks 10000 --repeats 60

A live conversation writes a turn and then searches, so most searches of an active user
first bring the index up to date (``IndexCache._refresh``). Timed, interleaved, the
query's embedding excluded (``SearchService.search_with_vector``):

- ``unchanged``: nothing was written since the last search (the baseline, same run);
- ``after_turn``: one new conversation turn was indexed just before (append-only path);
- ``after_replace``: 32 of the user's rows were replaced just before, as the vector worker
  writes back re-embedded rows (delete + insert under new ids: the path that compares the
  user's live ids with the ids held).

Uses the embedded PostgreSQL in a temporary data directory and the synthetic rows of
``memstrata bench latency``, with no embedding API (vectors are written directly). Prints
one JSON line: median and p95 per state and each state's median over the baseline's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta

import numpy as np

from memstrata.bench import latency
from memstrata.bench.http_common import _stats
from memstrata.cli.bench import bench_runtime
from memstrata.db.engine import transaction
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.search import SearchService
from memstrata.runtime import Memstrata

REPLACED = 32  # the vector worker's write-back batch


def _replace(mem: Memstrata, ids: list[int], rng: np.random.Generator) -> None:
    """What the vector worker's write-back does to the user's rows."""
    vectors = latency._unit(rng, len(ids), 384)
    with transaction(mem.db.sessions) as session:
        repo = EmbeddingRepository(session, latency.USER)
        repo.lock()
        replaced = repo.replace_vectors(
            {i: v.tolist() for i, v in zip(ids, vectors, strict=True)}, latency.MODEL
        )
    if replaced != len(ids):
        raise RuntimeError(f"replaced {replaced} of {len(ids)} rows; no figure")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(11)
    vocab = latency._vocabulary(rng)
    texts = latency._sentences(rng, vocab, args.chunks + args.repeats)
    queries = [" ".join(s.split()[:6]) for s in latency._sentences(rng, vocab, 3 * args.repeats)]
    qvecs = latency._unit(rng, len(queries), 384)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    samples: dict[str, list[float]] = {"unchanged": [], "after_turn": [], "after_replace": []}
    with bench_runtime(None, embeddings=False) as mem:
        latency._copy_rows(
            mem,
            [latency.USER] * args.chunks,
            texts[: args.chunks],
            latency._unit(rng, args.chunks, 384),
            start,
        )
        search = SearchService(IndexCache(mem.db.sessions), latency._NamedOnly())
        search.search_with_vector(latency.USER, queries[0], qvecs[0])  # the cold load
        q = iter(zip(queries, qvecs, strict=True))

        def timed(state: str) -> None:
            text, vector = next(q)
            started = time.perf_counter()
            search.search_with_vector(latency.USER, text, vector, top_k=latency.TOP_K)
            samples[state].append((time.perf_counter() - started) * 1000)

        for i in range(args.repeats):
            timed("unchanged")
            turn = Round(
                "live", i, texts[args.chunks + i], "Noted.", start + timedelta(days=60), []
            )
            mem.indexer.index_rounds(latency.USER, [turn])
            timed("after_turn")
            held = sorted(search.cache.get(latency.USER, latency.MODEL).rows)
            picked = rng.choice(len(held) - 1, REPLACED, replace=False)
            _replace(mem, [held[int(j)] for j in picked], rng)
            timed("after_replace")
        rows = len(search.cache.get(latency.USER, latency.MODEL).rows)
    if rows != args.chunks + args.repeats:
        raise RuntimeError(f"the index holds {rows} rows, not {args.chunks + args.repeats}")
    base = statistics.median(samples["unchanged"])
    result: dict[str, object] = {"chunks": args.chunks, "repeats": args.repeats}
    for state, values in samples.items():
        result[state] = {
            **_stats(values),
            "over_unchanged": round(statistics.median(values) / base, 2),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Cold load of one user's search index (10k rows), in process: rows whose BM25 terms are
stored (what the indexer writes), the same rows with the terms column cleared (tokenised
at load, as before migration 0003), and the same rows read from the user's index snapshot
(``retrieval/snapshot.py``), alternating, same run.

    .venv/bin/python benchmarks/cold_load.py --chunks 10000 --repeats 9

Uses the embedded PostgreSQL in a temporary data directory and the synthetic rows of
``memstrata bench latency``; the first search of a fresh ``IndexCache`` is timed (wall and
CPU), with no embedding API (vectors are written directly).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_runtime

if TYPE_CHECKING:
    from memstrata.retrieval.search import SearchService
    from memstrata.runtime import Memstrata


@dataclass
class SyntheticUsers:
    mem: Memstrata
    query: str
    query_vector: np.ndarray

    def fresh_search(self, snapshots: bool = False) -> SearchService:
        """A search service with an empty index cache: its first search is a cold load
        (from the user's index snapshot when ``snapshots`` and there is one)."""
        from memstrata.bench import latency as synthetic
        from memstrata.config import INDEX_SNAPSHOT_MIN_ROWS
        from memstrata.retrieval.cache import IndexCache
        from memstrata.retrieval.search import SearchService
        from memstrata.retrieval.snapshot import SnapshotWriter

        sessions = self.mem.db.sessions
        writer = SnapshotWriter(sessions, INDEX_SNAPSHOT_MIN_ROWS) if snapshots else None
        return SearchService(IndexCache(sessions, snapshots=writer), synthetic._NamedOnly())


def synthetic_model() -> str:
    from memstrata.bench import latency as synthetic

    return synthetic.MODEL


@contextmanager
def synthetic_users(users: Sequence[str], chunks: int) -> Iterator[SyntheticUsers]:
    """An embedded PostgreSQL in a temporary data directory holding ``chunks`` synthetic
    rows (``memstrata bench latency``'s) for each of ``users``, and a query for them."""
    from memstrata.bench import latency as synthetic

    with scratch_runtime("memstrata-cold-") as mem:
        rng = np.random.default_rng(7)
        vocab = synthetic._vocabulary(rng)
        texts = synthetic._sentences(rng, vocab, chunks)
        vectors = synthetic._unit(rng, chunks, 384)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        for user in users:
            synthetic._copy_rows(mem, [user] * chunks, texts, vectors, start)
        query = synthetic._sentences(rng, vocab, 1, 8)[0]
        yield SyntheticUsers(mem, query, synthetic._unit(rng, 1, 384)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    users = {
        "stored terms": "stored",
        "tokenised at load": "tokenised",
        "from a snapshot": "snapshot",
    }
    with synthetic_users(list(users.values()), args.chunks) as data:
        with data.mem.db.engine.begin() as conn:
            conn.execute(
                text("UPDATE memory_embeddings SET bm25_terms = NULL WHERE user_id = :u"),
                {"u": users["tokenised at load"]},
            )
        first = data.fresh_search(snapshots=True)
        first.search_with_vector(users["from a snapshot"], data.query, data.query_vector)
        writer = first.cache.snapshots
        if writer is None or not writer.idle() or writer.written != 1:
            raise SystemExit("the index snapshot was not written; no figures")
        wall: dict[str, list[float]] = {name: [] for name in users}
        cpu: dict[str, list[float]] = {name: [] for name in users}
        for _ in range(args.repeats):
            for name, user in users.items():
                search = data.fresh_search(snapshots=user == "snapshot")
                began, cpu_began = time.perf_counter(), time.process_time()
                search.search_with_vector(user, data.query, data.query_vector, top_k=10)
                wall[name].append((time.perf_counter() - began) * 1000)
                cpu[name].append((time.process_time() - cpu_began) * 1000)
                seeded = search.cache.get(user, synthetic_model()).unsnapshotted == 0
                if seeded != (user == "snapshot"):
                    raise SystemExit(f"{name}: the load did not go the intended way; no figures")
        for name in users:
            print(
                f"{name}: wall median {statistics.median(wall[name]):.0f} ms "
                f"(p95 {p95(wall[name]):.0f}, min {min(wall[name]):.0f}, "
                f"max {max(wall[name]):.0f}), CPU median {statistics.median(cpu[name]):.0f} ms"
            )


def p95(values: list[float]) -> float:
    """Nearest rank: of 9 loads, the largest; of 20, the 19th."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 95 // 100) - 1)]


if __name__ == "__main__":
    main()

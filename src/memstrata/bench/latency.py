"""Search latency at scale: one user with N chunks among M rows of other users.

Rows are synthetic (Zipf-distributed English words and Chinese characters, random unit
vectors): latency depends on sizes, not on meaning, and embedding 200k real passages would
take an hour here. They are written with binary COPY into the real table, padded to 2560
dimensions like every stored vector.

Measured, in one run:
- ``memstrata``: ``SearchService.search_with_vector`` warm — the query's embedding excluded,
  the per-search generation check against PostgreSQL included;
- ``baseline``: an in-process lower bound on the same data, bm25s (Lucene BM25) top-3k
  plus exact numpy cosine top-3k, no database, no fusion;
- ``pgvector``: the vector candidates fetched by an exact pgvector scan instead.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata.config import CANDIDATE_MULTIPLIER, STORED_VECTOR_DIM
from memstrata.db.engine import transaction
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.staging import content_hash
from memstrata.retrieval.terms import encode_terms, round_day
from memstrata.retrieval.tokenize import tokenize
from memstrata.runtime import Memstrata

MODEL = "bench-random"
USER = "bench-user"
TOP_K = 10


class _NamedOnly:
    """Carries the model name the benchmark's vectors are stored under; never embeds."""

    name = MODEL

    def embed(self, texts: Any, kind: Any) -> list[list[float]]:
        raise AssertionError("the latency benchmark passes query vectors directly")


def _vocabulary(rng: np.random.Generator) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(list(letters), size=rng.integers(3, 9))) for _ in range(6000)}
    hanzi = [chr(c) for c in rng.integers(0x4E00, 0x9FA5, size=800)]
    return sorted(words) + hanzi


def _sentences(rng: np.random.Generator, vocab: list[str], n: int, length: int = 40) -> list[str]:
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks**1.05
    p /= p.sum()
    picks = rng.choice(len(vocab), size=(n, length), p=p)
    return [" ".join(vocab[i] for i in row) for row in picks]


def _unit(rng: np.random.Generator, n: int, dim: int) -> npt.NDArray[np.float32]:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    unit: npt.NDArray[np.float32] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit


def _copy_rows(
    mem: Memstrata,
    user_ids: list[str],
    texts: list[str],
    vectors: npt.NDArray[np.float32],
    start: datetime,
    model: str = MODEL,
) -> None:
    from pgvector.psycopg import register_vector

    raw = mem.db.engine.raw_connection()
    try:
        conn = raw.driver_connection
        assert conn is not None
        register_vector(conn)
        padded = np.zeros(STORED_VECTOR_DIM, dtype=np.float32)
        dim = vectors.shape[1]
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY memory_embeddings (user_id, file_path, chunk_index, chunk_text, embedding, "
                "created_at, content_hash, embedding_model, embedding_dim, source_ids, "
                "bm25_terms) "
                "FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(
                [
                    "varchar",
                    "varchar",
                    "int4",
                    "text",
                    "vector",
                    "timestamptz",
                    "varchar",
                    "varchar",
                    "int4",
                    "jsonb",
                    "text",
                ]
            )
            from psycopg.types.json import Jsonb

            for i, (user, body) in enumerate(zip(user_ids, texts, strict=True)):
                padded[:dim] = vectors[i]
                path, at = f"sessions/bench/{i}", start + timedelta(minutes=i)
                copy.write_row(
                    (
                        user,
                        path,
                        0,
                        body,
                        padded,
                        at,
                        content_hash(body),
                        model,
                        dim,
                        Jsonb([f"bench:{i}"]),
                        encode_terms(body, round_day(path, at)),  # as the indexer stores them
                    )
                )
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("ANALYZE memory_embeddings")
        conn.commit()
    finally:
        raw.close()
    # Bumped as every writer bumps it (the repository), in a transaction of its own: COPY
    # needs the driver's connection. A cache that loaded in between already holds the rows.
    with transaction(mem.db.sessions) as session:
        for user in sorted(set(user_ids)):
            EmbeddingRepository(session, user).bump_generation()


def _stats(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(p95, 3)}


def run_latency(
    mem: Memstrata,
    *,
    chunks: int,
    others: int,
    queries: int,
    dim: int = 384,
    seed: int = 7,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    try:
        import bm25s  # noqa: F401  (checked here, before any row is loaded)
    except ModuleNotFoundError as exc:  # a dev/bench-only dependency
        raise SystemExit(
            "the latency baseline needs bm25s: pip install 'memstrata[bench]'"
        ) from exc
    say = progress or (lambda _m: None)
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    start = datetime(2026, 1, 1, tzinfo=UTC)

    texts = _sentences(rng, vocab, chunks + others)
    vectors = _unit(rng, chunks + others, dim)
    users = [USER] * chunks + [f"other-{i % 2000}" for i in range(others)]
    t0 = time.perf_counter()
    _copy_rows(mem, users, texts, vectors, start)
    say(f"loaded {chunks + others} rows in {time.perf_counter() - t0:.1f} s")

    search = SearchService(IndexCache(mem.db.sessions), _NamedOnly())
    query_texts = [" ".join(s.split()[:5]) for s in _sentences(rng, vocab, queries, 8)]
    query_vecs = _unit(rng, queries, dim)
    now = start + timedelta(days=200)

    cold_ms, cold_cpu_ms, peak = _cold_load(search, query_texts[0], query_vecs[0])
    say(f"cold load {cold_ms:.0f} ms, peak {peak / 2**20:.1f} MiB")
    ours = _warm_samples(search, query_texts, query_vecs)
    base = _baseline_samples(texts[:chunks], vectors[:chunks], query_texts, query_vecs)
    pg_samples = _pgvector_samples(mem, query_texts, query_vecs)
    index_one_ms, refresh_ms, rounds_per_s = _refresh(mem, search, query_vecs[0], rng, vocab, now)

    cache_entry = search.cache.get(USER, MODEL)
    ours_stats, base_stats = _stats(ours), _stats(base)
    return {
        "chunks": chunks,
        "other_rows": others,
        "queries": queries,
        "dim": dim,
        "p50_ms": ours_stats["p50_ms"],
        "p95_ms": ours_stats["p95_ms"],
        "baseline_p50_ms": base_stats["p50_ms"],
        "baseline_p95_ms": base_stats["p95_ms"],
        "ratio_p50": round(ours_stats["p50_ms"] / max(base_stats["p50_ms"], 1e-9), 2),
        "pgvector_backend_p50_ms": _stats(pg_samples)["p50_ms"],
        "pgvector_backend_p95_ms": _stats(pg_samples)["p95_ms"],
        "cold_load_ms": round(cold_ms, 1),
        "cold_load_cpu_ms": round(cold_cpu_ms, 1),
        "cache_peak_mib": round(peak / 2**20, 2),
        "cache_estimate_mib": round(cache_entry.approx_bytes() / 2**20, 2),
        "index_one_round_ms": round(index_one_ms, 2),
        "search_after_new_round_ms": round(refresh_ms, 2),
        "index_rounds_per_s_no_embedding": round(rounds_per_s, 1),
    }


def _cold_load(
    search: SearchService, query: str, vector: npt.NDArray[np.float32]
) -> tuple[float, float, int]:
    """The first search, which loads the user's index: wall ms, CPU ms, traced peak bytes."""
    tracemalloc.start()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    search.search_with_vector(USER, query, vector, top_k=TOP_K)
    cold_ms = (time.perf_counter() - t0) * 1000
    cold_cpu_ms = (time.process_time() - cpu0) * 1000  # stable on a busy machine
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return cold_ms, cold_cpu_ms, peak


def _warm_samples(
    search: SearchService, query_texts: list[str], query_vecs: npt.NDArray[np.float32]
) -> list[float]:
    for q, v in zip(query_texts[:20], query_vecs[:20], strict=True):  # warm-up
        search.search_with_vector(USER, q, v, top_k=TOP_K)
    ours = []
    for q, v in zip(query_texts, query_vecs, strict=True):
        t = time.perf_counter()
        search.search_with_vector(USER, q, v, top_k=TOP_K)
        ours.append((time.perf_counter() - t) * 1000)
    return ours


def _baseline_samples(
    texts: list[str],
    vectors: npt.NDArray[np.float32],
    query_texts: list[str],
    query_vecs: npt.NDArray[np.float32],
) -> list[float]:
    """In-process lower bound on the same data (the measured user's rows)."""
    import bm25s

    chunks = len(texts)
    corpus_tokens = [tokenize(t) for t in texts]
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(corpus_tokens, show_progress=False)
    matrix = np.ascontiguousarray(vectors)
    n_cand = TOP_K * CANDIDATE_MULTIPLIER
    base = []
    for q, v in zip(query_texts, query_vecs, strict=True):
        t = time.perf_counter()
        q_tokens = [w for w in tokenize(q) if w in retriever.vocab_dict]
        if q_tokens:
            retriever.retrieve([q_tokens], k=min(n_cand, chunks), show_progress=False, n_threads=1)
        sims = matrix @ v
        top = np.argpartition(-sims, min(n_cand, chunks) - 1)[:n_cand]
        ranked = top[np.argsort(-sims[top])]
        assert len(ranked) == min(n_cand, chunks)
        base.append((time.perf_counter() - t) * 1000)
    return base


def _pgvector_samples(
    mem: Memstrata, query_texts: list[str], query_vecs: npt.NDArray[np.float32]
) -> list[float]:
    pg = SearchService(
        IndexCache(mem.db.sessions),
        _NamedOnly(),
        vector_backend="pgvector",
    )
    pg.search_with_vector(USER, query_texts[0], query_vecs[0], top_k=TOP_K)
    pg_samples = []
    for q, v in list(zip(query_texts, query_vecs, strict=True))[:30]:
        t = time.perf_counter()
        pg.search_with_vector(USER, q, v, top_k=TOP_K)
        pg_samples.append((time.perf_counter() - t) * 1000)
    return pg_samples


def _refresh(
    mem: Memstrata,
    search: SearchService,
    vector: npt.NDArray[np.float32],
    rng: np.random.Generator,
    vocab: list[str],
    now: datetime,
) -> tuple[float, float, float]:
    """Incremental refresh: one new round, then the next search; then the rounds per
    second of a 500-round import without embeddings."""
    indexer = Indexer(mem.db.sessions, None)
    t = time.perf_counter()
    indexer.index_rounds(USER, [Round("live", 0, "a fresh turn about kites", "", now)])
    index_one_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    search.search_with_vector(USER, "kites", vector, top_k=TOP_K)
    refresh_ms = (time.perf_counter() - t) * 1000

    rounds = [Round("thru", i, s, "", now) for i, s in enumerate(_sentences(rng, vocab, 500))]
    t = time.perf_counter()
    indexer.index_rounds("bench-throughput", rounds)
    rounds_per_s = len(rounds) / (time.perf_counter() - t)
    return index_one_ms, refresh_ms, rounds_per_s

"""Heap bytes of the per-user search indexes per 1,000 chunks, measured with tracemalloc.

Called by ``run.py`` on the freshly seeded database (real LoCoMo rows with their context
prefixes and real 384-dimension e5 vectors). The cache's running estimate
(``UserIndex.approx_bytes``, what the byte budget counts) is reported beside the
measurement. The same rows are measured again with random unit vectors of the stored
2560 dimensions, the size a 2560-dimension model would hold.
"""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import text

from memstrata.config import STORED_VECTOR_DIM
from memstrata.retrieval.records import StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.user_index import UserIndex
from memstrata.runtime import Memstrata


def largest_users(mem: Memstrata, prefix: str, count: int) -> list[str]:
    with mem.db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT user_id FROM memory_embeddings WHERE user_id LIKE :p "
                "GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT :n"
            ),
            {"p": prefix + "%", "n": count},
        )
        return [r[0] for r in rows]


def _measure(chunks: list[StoredChunk], model: str) -> tuple[int, int]:
    """(tracemalloc bytes held by a UserIndex built from ``chunks``, its estimate)."""
    # The index keeps its own copies of the texts after a load; copy them here so the
    # measurement counts them, as it would after the loader's rows are garbage.
    owned = [replace(c, chunk_text="".join(list(c.chunk_text))) for c in chunks]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = UserIndex("measure", model)
    index.apply(owned, [])
    del owned
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return held, index.approx_bytes()


def measure(mem: Memstrata, users: list[str]) -> dict[str, Any]:
    chunks: list[StoredChunk] = []
    with mem.db.sessions() as session:
        for user in users:
            chunks += EmbeddingRepository(session, user).load()
    model = next(c.embedding_model for c in chunks if c.embedding_model)
    native = len(next(c.vector for c in chunks if c.vector is not None))  # type: ignore[arg-type]
    held, estimate = _measure(chunks, model)
    rng = np.random.default_rng(7)
    wide = []
    for c in chunks:
        v = rng.standard_normal(STORED_VECTOR_DIM).astype(np.float32)
        wide.append(replace(c, vector=v / np.linalg.norm(v)))
    held_wide, estimate_wide = _measure(wide, model)
    per_1k = 1000 / len(chunks)
    return {
        "chunks": len(chunks),
        "users": len(users),
        "mean_chars_per_chunk": round(sum(len(c.chunk_text) for c in chunks) / len(chunks)),
        f"bytes_per_1k_chunks_{native}d": round(held * per_1k),
        f"estimate_per_1k_chunks_{native}d": round(estimate * per_1k),
        f"bytes_per_1k_chunks_{STORED_VECTOR_DIM}d": round(held_wide * per_1k),
        f"estimate_per_1k_chunks_{STORED_VECTOR_DIM}d": round(estimate_wide * per_1k),
        "native_dim": native,
    }

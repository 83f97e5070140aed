"""The write path's two text inserts as they were before new vectors went in binary
(``retrieval.vector_binary``): an ORM insert, each vector as pgvector's text, and the JSON
statement with vectors as text inside it. Kept to compare against — the stored rows in
tests/retrieval/test_binary_insert.py, the cost in benchmarks/insert_path.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from memstrata.db.models import MemoryEmbedding
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository_writes import _own_columns
from memstrata.retrieval.vector import pad_vector

_OLD_COPIES = text(
    "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, "
    "content_hash, source_ids, context, bm25_terms, created_at, embedding, embedding_model, "
    "embedding_dim) "
    "SELECT :u, v.file_path, v.chunk_index, v.chunk_text, v.content_hash, v.source_ids, "
    "v.context, v.bm25_terms, coalesce(v.created_at, now()), "
    "CASE WHEN s.id IS NULL THEN cast(v.embedding AS vector) ELSE s.embedding END, "
    "CASE WHEN s.id IS NULL THEN v.embedding_model ELSE s.embedding_model END, "
    "CASE WHEN s.id IS NULL THEN v.embedding_dim ELSE s.embedding_dim END "
    "FROM jsonb_to_recordset(cast(:rows AS jsonb)) AS v(n int, source bigint, "
    "file_path text, chunk_index int, chunk_text text, content_hash text, source_ids jsonb, "
    "context jsonb, bm25_terms text, created_at timestamptz, embedding text, "
    "embedding_model text, embedding_dim int) "
    "LEFT JOIN memory_embeddings s ON s.id = v.source AND s.user_id = :u "
    "ORDER BY v.n"
)


def old_insert(session: Session, user_id: str, chunks: Sequence[NewChunk]) -> None:
    """``EmbeddingRepository.insert`` as it was: ORM batches, vectors as pgvector's text."""
    values = []
    for c in chunks:
        own = c.embedding
        row: dict[str, Any] = {"user_id": user_id, **_own_columns(c), "embedding_model": None}
        row.update(embedding=None if own is None else pad_vector(own), embedding_dim=None)
        if own is not None:
            row.update(embedding_model=c.embedding_model, embedding_dim=len(own))
        if c.created_at is not None:
            row["created_at"] = c.created_at
        values.append(row)
    for batch in (
        [v for v in values if "created_at" in v],
        [v for v in values if "created_at" not in v],
    ):
        if batch:
            session.execute(pg_insert(MemoryEmbedding), batch)


def old_insert_copies(
    session: Session, user_id: str, rows: Sequence[tuple[int | None, NewChunk]]
) -> None:
    """``EmbeddingRepository.insert_copies`` as it was: vectors as text inside JSON."""
    values = []
    for n, (source, c) in enumerate(rows):
        own = c.embedding if source is None else None
        values.append(
            {
                "n": n,
                "source": source,
                **_own_columns(c),
                "created_at": None if c.created_at is None else c.created_at.isoformat(),
                "embedding": None if own is None else f"[{','.join(map(str, pad_vector(own)))}]",
                "embedding_model": None if own is None else c.embedding_model,
                "embedding_dim": None if own is None else len(own),
            }
        )
    if values:
        session.execute(_OLD_COPIES, {"u": user_id, "rows": json.dumps(values)})

"""The values the embedding repository reads and writes: plain immutable records, no SQL.

Kept apart from ``retrieval.repository`` so that the in-memory index (``rows``,
``user_index``, ``rounds``) can name a row without importing the database layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

# Conversation rows' file_path: ``sessions/<session_id>/<turn_index>`` (retrieval.rounds).
SESSION_PREFIX = "sessions/"


def is_conversation_path(file_path: str | None) -> bool:
    return file_path is not None and file_path.startswith(SESSION_PREFIX)


@dataclass(frozen=True)
class NewChunk:
    """A row to write. ``embedding`` is the native (unpadded) vector or None."""

    file_path: str
    chunk_index: int
    chunk_text: str
    content_hash: str
    created_at: datetime | None = None
    embedding: Sequence[float] | None = None
    embedding_model: str | None = None
    source_ids: Sequence[str] | None = None
    context: dict[str, Any] | None = None
    bm25_terms: str | None = None  # retrieval.terms.encode_terms; made at insert when None


class StoredChunk(NamedTuple):
    """A stored row as read: a named tuple, not a frozen dataclass (as ``rows.Row``), since
    a cold load reads one per row of the user, and a frozen dataclass cost ~1.3 µs more each
    to build (docs/BENCHMARKS.md, "Vector column storage")."""

    id: int
    file_path: str | None
    chunk_index: int | None
    chunk_text: str
    created_at: datetime
    content_hash: str
    embedding_model: str | None
    embedding_dim: int | None
    source_ids: tuple[str, ...]
    vector: npt.NDArray[np.float32] | None  # native length, only when asked for
    context: dict[str, Any] | None = None
    bm25_terms: str | None = None  # only from load()

    @property
    def context_chars(self) -> int:
        return int(self.context.get("chars", 0)) if self.context else 0

    @property
    def covered_ids(self) -> tuple[str, ...]:
        """Every turn whose text the row holds: the context's, then its own."""
        extra = tuple(self.context.get("source_ids", ())) if self.context else ()
        return extra + self.source_ids


@dataclass(frozen=True)
class IndexState:
    """``memory_index_state`` of one user (migration 0005 says how the counts work)."""

    generation: int  # every write
    removals: int  # rows deleted by writers that count them
    counted_writes: int  # writes by such writers

    def counted_since(self, earlier: IndexState) -> bool:
        """Whether every write between ``earlier`` and this state counted its deletions,
        so that ``removals`` tells whether any row went."""
        writes = self.generation - earlier.generation
        return writes == self.counted_writes - earlier.counted_writes


def with_vector(c: StoredChunk, vector: Sequence[float], model: str) -> NewChunk:
    """A stored row written again as it is, with a new vector (re-embedding replaces rows:
    rows are immutable, see ``retrieval.cache``)."""
    return NewChunk(
        file_path=c.file_path or "",
        chunk_index=c.chunk_index or 0,
        chunk_text=c.chunk_text,
        content_hash=c.content_hash,
        created_at=c.created_at,
        embedding=vector,
        embedding_model=model,
        source_ids=c.source_ids or None,
        context=c.context,
        bm25_terms=c.bm25_terms,
    )

"""Rows written straight into one user's index, as a writer does it: under the user's lock,
with the generation bumped so caches see the change."""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository import EmbeddingRepository


def insert_rows(db: Database, user_id: str, chunks: Sequence[NewChunk]) -> None:
    with transaction(db.sessions) as session:
        repo = EmbeddingRepository(session, user_id)
        repo.lock()
        repo.insert(list(chunks))
        repo.bump_generation()

"""One user's ``memory_index_state`` row (generation and counts) and the writers' lock
(part of ``EmbeddingRepository``)."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert

from memstrata.db.models import MemoryIndexState
from memstrata.retrieval.records import IndexState
from memstrata.retrieval.repository_scope import UserScoped


class EmbeddingState(UserScoped):
    def state(self) -> IndexState:
        """The user's generation and counts (zeros before the first write)."""
        found = self.session.execute(
            select(
                MemoryIndexState.generation,
                MemoryIndexState.removals,
                MemoryIndexState.counted_writes,
            ).where(MemoryIndexState.user_id == self.user_id)
        ).first()
        return IndexState(*(int(v) for v in found)) if found is not None else IndexState(0, 0, 0)

    def bump_generation(self) -> int:
        """A write to the user's rows, whose deletions went through ``delete_ids``."""
        stmt = (
            insert(MemoryIndexState)
            .values(user_id=self.user_id, generation=1, counted_writes=1)
            .on_conflict_do_update(
                index_elements=[MemoryIndexState.user_id],
                set_={
                    "generation": MemoryIndexState.generation + 1,
                    "counted_writes": MemoryIndexState.counted_writes + 1,
                },
            )
            .returning(MemoryIndexState.generation)
        )
        return int(self.session.scalar(stmt) or 0)

    def lock(self) -> None:
        """Serialise writers of one user's rows (transaction-scoped advisory lock)."""
        self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"memstrata.embeddings:{self.user_id}"},
        )

    def _count_removals(self, n: int) -> None:
        """Tell every search cache that rows went (``IndexCache`` compares ids only then).
        A writer outside ``EmbeddingRepository`` that bumps only the generation is safe too: caches
        then count the user's rows (migration 0005)."""
        self.session.execute(
            insert(MemoryIndexState)
            .values(user_id=self.user_id, generation=0, removals=n, counted_writes=0)
            .on_conflict_do_update(
                index_elements=[MemoryIndexState.user_id],
                set_={"removals": MemoryIndexState.removals + n},
            )
        )

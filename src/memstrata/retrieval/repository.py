"""SQL for ``memory_embeddings`` and ``memory_index_state``, scoped to one user.

Rows are immutable: any change to a chunk deletes its row and inserts a new one (new id),
and every change bumps the user's generation in the same transaction; a deletion also
adds to the user's removal count, and the bump says it was counted. An in-memory index
that remembers those counts and the ids it holds can therefore bring itself up to date from
any process: rows with larger ids when nothing was removed, a comparison of id sets when
something was (or a writer did not count) — no change log needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memstrata.db.models import MemoryEmbedding
from memstrata.retrieval.records import with_vector
from memstrata.retrieval.repository_reads import EmbeddingReads
from memstrata.retrieval.repository_writes import EmbeddingWrites


class EmbeddingRepository(EmbeddingWrites, EmbeddingReads):
    """Every statement on the user's ``memory_embeddings`` and ``memory_index_state`` rows:
    the reads (``repository_reads``), the writes (``repository_writes``) and the state row
    and lock they share (``repository_state``), all built for one user (``repository_scope``).
    """

    def replace_vectors(self, vectors: Mapping[int, Sequence[float]], model: str) -> int:
        """Give rows their vectors (re-embedding): rows are immutable, so each is written
        again with its vector, under a new id; rows gone since they were read (a writer
        replaced them, their text with them) are skipped. Call under :meth:`lock`. Bumps
        the generation when anything was written; returns how many rows were."""
        present = self.load(list(vectors))
        if present:
            # The texts stay (each row comes back with its vector), so the user's snapshots
            # stay valid: a load from one finds the old rows gone and the new ones above its
            # max_id, as after any write. Dropping them made every healing pass of an import
            # or a model change cost the user a full cold load (and a snapshot rewrite).
            self._delete(MemoryEmbedding.id.in_([c.id for c in present]), keep_snapshots=True)
        self.insert([with_vector(c, vectors[c.id], model) for c in present])
        if present:
            self.bump_generation()
        return len(present)

"""A bounded LRU of query embeddings around any ``EmbeddingProvider``.

On the search path the query's embedding is most of the latency (an HTTP round trip to the
embedding API, 10–70 ms here, against ~3 ms for the search itself), and agents and users
repeat queries. Only ``kind="query"`` calls are cached: passages are embedded once and
stored in PostgreSQL anyway. Entries are keyed by the user, the model name and the text: by
the model, so a model change never serves a vector of the old model; by the user, because a
hit shows in the answer's time (``timings_ms.embed``, and the wall clock: ~0 ms against
15-60 ms), so one cache across users told anyone whether another user had searched a given
text. Failures are not cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from memstrata.config import QUERY_CACHE_ENTRIES
from memstrata.retrieval.embeddings import EmbeddingKind, EmbeddingProvider


class CachedQueryEmbedder:
    """Wraps ``inner``; ``name`` is the inner provider's, so stored rows are unaffected."""

    def __init__(self, inner: EmbeddingProvider, max_entries: int = QUERY_CACHE_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.inner = inner
        self.name = inner.name
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, str], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def forget_user(self, user_id: str) -> int:
        """Drop ``user_id``'s entries (their keys hold the user's search texts: an
        erasure); how many went."""
        with self._lock:
            keys = [k for k in self._entries if k[0] == user_id]
            for key in keys:
                del self._entries[key]
        return len(keys)

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        """The ``EmbeddingProvider`` call, for callers with no user (entries of their own)."""
        return self.embed_for("", texts, kind)

    def embed_for(
        self, user_id: str, texts: Sequence[str], kind: EmbeddingKind
    ) -> list[list[float]]:
        """``embed`` with ``user_id``'s entries only (module doc)."""
        if kind != "query":
            return self.inner.embed(texts, kind)
        model = self.inner.name
        # A vector cached before the model's length changed (a length learned from a
        # broken answer, then replaced) is no answer any more.
        length = getattr(self.inner, "dimensions", None)
        found: dict[int, tuple[float, ...]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                cached = self._entries.get((user_id, model, text))
                if cached is not None and (length is None or len(cached) == length):
                    self._entries.move_to_end((user_id, model, text))
                    found[i] = cached
            self.hits += len(found)
            self.misses += len(texts) - len(found)
        todo = [i for i in range(len(texts)) if i not in found]
        if todo:
            fresh = self.inner.embed([texts[i] for i in todo], kind)
            with self._lock:
                for i, vector in zip(todo, fresh, strict=True):
                    found[i] = tuple(vector)
                    self._entries[(user_id, model, texts[i])] = found[i]
                    self._entries.move_to_end((user_id, model, texts[i]))
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return [list(found[i]) for i in range(len(texts))]

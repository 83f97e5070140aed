"""A bounded LRU of query embeddings around any ``EmbeddingProvider``.

On the search path the query's embedding is most of the latency (an HTTP round trip to the
embedding API, 10–70 ms here, against ~3 ms for the search itself), and agents and users
repeat queries. Only ``kind="query"`` calls are cached: passages are embedded once and
stored in PostgreSQL anyway. Entries are keyed by the model name *and* the text, so a
model change never serves a vector of the old model. Failures are not cached.
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
        self._entries: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        if kind != "query":
            return self.inner.embed(texts, kind)
        model = self.inner.name
        found: dict[int, tuple[float, ...]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                cached = self._entries.get((model, text))
                if cached is not None:
                    self._entries.move_to_end((model, text))
                    found[i] = cached
            self.hits += len(found)
            self.misses += len(texts) - len(found)
        todo = [i for i in range(len(texts)) if i not in found]
        if todo:
            fresh = self.inner.embed([texts[i] for i in todo], kind)
            with self._lock:
                for i, vector in zip(todo, fresh, strict=True):
                    found[i] = tuple(vector)
                    self._entries[(model, texts[i])] = found[i]
                    self._entries.move_to_end((model, texts[i]))
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return [list(found[i]) for i in range(len(texts))]

"""A bounded LRU of query embeddings around any ``EmbeddingProvider``.

On the search path the query's embedding is most of the latency (an HTTP round trip to the
embedding API, 10–70 ms here, against ~3 ms for the search itself), and agents and users
repeat queries. Only ``kind="query"`` calls are cached: passages are embedded once and
stored in PostgreSQL anyway. Entries are keyed by the user, the model name and the text: by
the model, so a model change never serves a vector of the old model; by the user, because a
hit shows in the answer's time (``timings_ms.embed``, and the wall clock: ~0 ms against
15-60 ms), so one cache across users told anyone whether another user had searched a given
text. Failures are not cached.

Bounded by entries and, when given, by bytes (``entry_bytes``, what the entries hold):
the least recently used go until both hold. A vector is kept as an ``array`` of doubles —
the same values the provider returned, a quarter of the memory a tuple of floats took
(3.1 KiB instead of 12.0 KiB at 384 dimensions).
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from memstrata.config import QUERY_CACHE_ENTRIES
from memstrata.retrieval.embeddings import EmbeddingKind, EmbeddingProvider

# Heap bytes of one entry besides its strings and vector: the key tuple and the
# OrderedDict's slot and link (measured with tracemalloc, rounded up:
# tests/retrieval/test_query_cache_bytes.py).
ENTRY_OVERHEAD_BYTES = 200

Key = tuple[str, str, str]  # (user, model, text)


def entry_bytes(key: Key, vector: array[float]) -> int:
    """What one entry holds: its strings, its vector and the overhead of an entry."""
    return sum(sys.getsizeof(s) for s in key) + sys.getsizeof(vector) + ENTRY_OVERHEAD_BYTES


@dataclass(frozen=True)
class QueryCacheStats:
    """What ``/metrics`` shows about the query-embedding cache."""

    entries: int
    bytes: int
    max_bytes: int | None


class CachedQueryEmbedder:
    """Wraps ``inner``; ``name`` is the inner provider's, so stored rows are unaffected."""

    def __init__(
        self,
        inner: EmbeddingProvider,
        max_entries: int = QUERY_CACHE_ENTRIES,
        max_bytes: int | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.inner = inner
        self.name = inner.name
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Key, array[float]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> QueryCacheStats:
        with self._lock:
            return QueryCacheStats(len(self._entries), self._bytes, self.max_bytes)

    def bound(self, max_bytes: int | None) -> None:
        """Set the byte bound (None: entries only), evicting down to it at once."""
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def forget_user(self, user_id: str) -> int:
        """Drop ``user_id``'s entries (their keys hold the user's search texts: an
        erasure); how many went."""
        with self._lock:
            keys = [k for k in self._entries if k[0] == user_id]
            for key in keys:
                self._bytes -= entry_bytes(key, self._entries.pop(key))
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
        found: dict[int, array[float]] = {}
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
                    found[i] = array("d", vector)
                    self._put((user_id, model, texts[i]), found[i])
                self._evict()
        return [found[i].tolist() for i in range(len(texts))]

    def _put(self, key: Key, vector: array[float]) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= entry_bytes(key, old)
        self._entries[key] = vector
        self._bytes += entry_bytes(key, vector)

    def _evict(self) -> None:
        """Drop least recently used entries until both bounds hold (an entry larger than
        the whole byte bound goes too: nothing is kept beyond it)."""
        while self._entries and (
            len(self._entries) > self.max_entries
            or (self.max_bytes is not None and self._bytes > self.max_bytes)
        ):
            key, vector = self._entries.popitem(last=False)
            self._bytes -= entry_bytes(key, vector)

"""Per-user in-memory search indexes that stay coherent with the database.

The database is canonical; an index here is a derived copy. Every write to a user's
``memory_embeddings`` rows bumps ``memory_index_state.generation`` in the same transaction
(see ``repository``), so before each search the cache reads one row: generation unchanged →
serve from memory; changed → load the rows with larger ids than any held, and only when
rows may have been deleted too (the removal counts, migration 0005), diff the user's live
row ids against the ids held. That works across processes with no extra channel, costs one
primary-key lookup per search, and an append-only conversation stream refreshes by reading
just its new rows.

What the byte budget counts is resident memory: each index's own estimate
(``UserIndex.approx_bytes``, calibrated against the RSS a process was measured to hold for
it); and once loads and evictions have moved a lot, the C allocator is asked to return its
free pages (``trim_allocator``), which it otherwise keeps — one heap per thread that loaded
(docs/BENCHMARKS.md, "Search cache memory (RSS vs estimate)").
"""

from __future__ import annotations

import ctypes
import logging
import platform
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cache, partial

from sqlalchemy.orm import Session, sessionmaker

from memstrata.config import SEARCH_CACHE_USERS
from memstrata.logs import log_failure
from memstrata.retrieval import snapshot
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.gcpause import cyclic_gc_paused
from memstrata.retrieval.query_cache import CachedQueryEmbedder, QueryCacheStats
from memstrata.retrieval.records import IndexState
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.snapshot_repository import SnapshotRepository
from memstrata.retrieval.state_reader import StateSource, reader_of
from memstrata.retrieval.user_index import UserIndex

logger = logging.getLogger(__name__)

# Loads and evictions that moved this many charged bytes since the allocator was last
# trimmed trim it again: a 10k-row load leaves ~60 MiB of freed memory in its thread's
# heap, which a trim returns in 6–16 ms (31 ms the slowest seen); below this a trim frees
# too little to matter.
TRIM_AFTER_BYTES = 32 * 1024 * 1024
# Share of the byte budget the query-embedding cache may hold, kept from the indexes' part:
# 8 MiB of the default 512 MiB, ~2,300 entries of a 384-d model (its 1,024-entry cap binds
# first) or ~390 of a 2560-d one.
QUERY_CACHE_SHARE = 1 / 64


def query_share(max_bytes: int | None) -> int | None:
    """The query-embedding cache's byte bound within ``max_bytes`` (None: no budget)."""
    return None if max_bytes is None else int(max_bytes * QUERY_CACHE_SHARE)


def trim_due(moved_since_trim: int, trim_after: int | None) -> bool:
    """Whether loads and evictions moved enough bytes since the last trim to trim now
    (``trim_after`` None: never)."""
    return trim_after is not None and moved_since_trim > 0 and moved_since_trim >= trim_after


@cache
def _malloc_trim() -> Callable[[int], object] | None:
    """glibc's ``malloc_trim``, or None where there is none (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library this process already runs
    except (OSError, AttributeError):
        return None


def trim_allocator() -> bool:
    """Return the C allocator's free pages to the system; whether it could be asked.

    Freed index memory stays in glibc's heaps (one per thread that allocated, so the
    request threads' loads each keep their own) and counts in RSS until reused."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@dataclass(frozen=True)
class CacheStats:
    """What ``/metrics`` shows about one process's search indexes."""

    bytes: int
    users: int
    hits: int
    misses: int
    evictions: int
    max_bytes: int | None
    snapshot_loads: int = 0  # cold loads that started from an index snapshot
    snapshot_writes: int = 0
    snapshot_errors: int = 0  # unreadable snapshots and failed writes
    trims: int = 0  # times the C allocator was asked to return freed pages
    trim_seconds: float = 0.0
    queries: QueryCacheStats | None = None  # the query-embedding cache sharing the budget


class IndexCache:
    """LRU of ``UserIndex`` objects, refreshed against the database generation.

    Bounded by ``max_users`` and, when given, by ``max_bytes`` (the sum of the indexes'
    ``approx_bytes``): least recently used users are evicted until both hold. The index
    just searched is never evicted by its own search, so one user larger than the whole
    budget is still served (and goes at the next search of anyone else). Once loads and
    evictions have moved ``trim_after_bytes`` since the last trim, the search that saw it
    trims the allocator (None: never).

    ``states`` is the check before every search (``retrieval.state_reader``): the runtime
    passes its engine's reader, refused once the runtime is closed; without one the cache
    takes the shared reader of the engine ``sessions`` binds to (``reader_of``).
    ``database_check`` is asked before a load opens its session (the runtime passes
    ``Database.refuse_if_lost``): a cold index has no generation to check, and its load
    took a new connection that waited 2 s in a freeze for each search queued on the index.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        max_users: int = SEARCH_CACHE_USERS,
        max_bytes: int | None = None,
        snapshots: snapshot.SnapshotWriter | None = None,
        trim_after_bytes: int | None = TRIM_AFTER_BYTES,
        *,
        states: StateSource | None = None,
        database_check: Callable[[], None] | None = None,
    ) -> None:
        self.sessions = sessions
        self.states: StateSource = states if states is not None else reader_of(sessions)
        self.database_check = database_check
        self.max_users = max_users
        self.max_bytes = max_bytes
        self.snapshots = snapshots  # None: neither read nor write index snapshots
        self.trim_after_bytes = trim_after_bytes
        self._entries: OrderedDict[tuple[str, str | None], UserIndex] = OrderedDict()
        self._sizes: dict[tuple[str, str | None], int] = {}
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._snapshot_loads = self._snapshot_errors = 0
        self._moved = 0  # charged bytes loaded or evicted since the allocator was trimmed
        self._trims = 0
        self._trim_seconds = 0.0
        self._queries: CachedQueryEmbedder | None = None
        self._reserved = 0  # of max_bytes: the query-embedding cache's share
        self._lock = threading.Lock()

    def share_budget(self, queries: EmbeddingProvider | None) -> None:
        """Bound the query-embedding cache ``queries`` (when it is one) by its share of the
        byte budget, keep that share from the indexes, and report its size in ``stats``:
        one setting bounds the memory of both search caches."""
        if not isinstance(queries, CachedQueryEmbedder):
            return
        bound = query_share(self.max_bytes)
        queries.bound(bound)
        with self._lock:
            self._queries = queries
            self._reserved = bound or 0

    def get(self, user_id: str, model: str | None) -> UserIndex:
        """The user's index, brought up to date; the caller holds ``index.lock`` while using it."""
        key = (user_id, model)
        with self._lock:
            index = self._entries.get(key)
            if index is None:
                self._misses += 1
                index = UserIndex(user_id, model)
                self._entries[key] = index
            else:
                self._hits += 1
            self._entries.move_to_end(key)
            self._evict(keep=key)
        with index.lock:
            changed = self._refresh(index)
            size = index.approx_bytes() if changed else None
        if size is not None:
            with self._lock:
                if self._entries.get(key) is index:  # not evicted meanwhile
                    grown = size - self._sizes.get(key, 0)
                    self._bytes += grown
                    self._moved += abs(grown)  # a load's garbage is about its size
                    self._sizes[key] = size
                    self._evict(keep=key)
        self._maybe_trim()
        return index

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self._bytes,
                len(self._entries),
                self._hits,
                self._misses,
                self._evictions,
                self.max_bytes,
                self._snapshot_loads,
                self.snapshots.written if self.snapshots is not None else 0,
                self._snapshot_errors + (self.snapshots.failed if self.snapshots else 0),
                self._trims,
                self._trim_seconds,
                self._queries.stats() if self._queries is not None else None,
            )

    def _evict(self, keep: tuple[str, str | None]) -> None:
        """Drop least recently used entries (never ``keep``) until both bounds hold."""
        budget = None if self.max_bytes is None else self.max_bytes - self._reserved
        while len(self._entries) > 1 and (
            len(self._entries) > max(self.max_users, 1)
            or (budget is not None and self._bytes > budget)
        ):
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            self._entries.pop(oldest).evicted = True
            freed = self._sizes.pop(oldest, 0)
            self._bytes -= freed
            self._moved += freed
            self._evictions += 1

    def _maybe_trim(self) -> None:
        """Trim the allocator when loads and evictions moved enough since the last trim:
        outside the cache's lock (a trim takes milliseconds), by the one search that saw
        it due."""
        with self._lock:
            if not trim_due(self._moved, self.trim_after_bytes):
                return
            self._moved = 0
        began = time.perf_counter()
        if trim_allocator():
            with self._lock:
                self._trims += 1
                self._trim_seconds += time.perf_counter() - began

    def _refresh(self, index: UserIndex) -> bool:
        """Bring ``index`` to the database's current state for its user.

        Writers of one user's rows are serialised by an advisory lock and rows are
        immutable, so ids are committed in increasing order per user: the rows added since
        the last refresh are exactly those with a larger id. Whether rows were deleted too
        comes from the removal count when every write since counted its deletions
        (``IndexState.counted_since``), else from ``held + added − count``; only then are
        the id sets compared (counting the user's rows after every new turn was a third of
        the refresh at 10k rows). A cold load starts from the user's snapshot when there
        is one (its conversation rows up to ``max_id``) and reads the rest — memory files,
        documents, later rows — the same way. One REPEATABLE READ snapshot keeps the reads
        consistent with each other. Returns whether anything was (re)loaded.
        """
        if index.generation >= 0 and self._is_current(index):
            return False
        if self.database_check is not None:
            self.database_check()
        with self.sessions() as session:
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            repo = EmbeddingRepository(session, index.user_id)
            state = repo.state()
            if state.generation == index.generation:
                return False
            removed: set[int] = set()
            with cyclic_gc_paused(), self._loading():
                cold = index.generation < 0
                if cold:
                    index.reset()  # an earlier cold load may have failed after seeding
                seeded_to = self._seed(index, session) if cold else None
                if cold and seeded_to is None:
                    added = repo.load()
                else:
                    after = seeded_to if seeded_to is not None else max(index.rows, default=0)
                    added = repo.load(after_id=after, files_too=seeded_to is not None)
                    if _rows_may_be_gone(index, repo, state, cold, len(added)):
                        live = repo.live_ids()
                        removed = set(index.rows) - live
                        missing = live - set(index.rows) - {c.id for c in added}
                        added += repo.load(sorted(missing)) if missing else []
                if index.apply(added, removed):
                    # The vectors' length changed: those of the new length stored before
                    # these rows (or in the snapshot) are not in the index. Load them all.
                    index.reset()
                    index.apply(repo.load(), ())
        index.state = state
        self._maybe_snapshot(index)
        return True

    def _is_current(self, index: UserIndex) -> bool:
        """Whether the database's generation is still the index's: the check before every
        search (``states``), one autocommit statement on a pool of its own; the REPEATABLE
        READ transaction is opened only to load."""
        return self.states(index.user_id).generation == index.generation

    def _loading(self) -> AbstractContextManager[None]:
        return self.snapshots.loading() if self.snapshots is not None else nullcontext()

    def _seed(self, index: UserIndex, session: Session) -> int | None:
        """Fill a cold ``index`` from the user's snapshot; its ``max_id``, or None when
        there is no usable one (the caller then loads every row)."""
        if self.snapshots is None or self.snapshots.min_rows <= 0:
            return None
        stored = SnapshotRepository(session, index.user_id).snapshot(
            snapshot.model_key(index.model)
        )
        if stored is None or stored.format != snapshot.format_key():
            return None
        try:
            index.seed(snapshot.decode(stored.payload, stored.max_id))
        except ValueError as exc:  # SnapshotError, or arrays that do not fit together
            log_failure(logger, "index.snapshot.unreadable", exc, user_id=index.user_id)
            with self._lock:
                self._snapshot_errors += 1
            index.reset()
            return None
        with self._lock:
            self._snapshot_loads += 1
        return stored.max_id

    def warm(self, user_id: str, model: str | None, uncovered: int) -> UserIndex:
        """Bring the user's index up to date, and have its snapshot written when the
        database says ``uncovered`` conversation rows are in no stored snapshot — which the
        index's own count misses when the snapshot was dropped after it was exported (a
        deletion drops it) while the index stayed current."""
        index = self.get(user_id, model)
        with index.lock:
            # Otherwise the refresh counted them, and scheduled the write if one was due.
            missed = uncovered > index.unsnapshotted
            if missed:
                index.unsnapshotted = uncovered
        if missed:
            self._maybe_snapshot(index)
        return index

    def _maybe_snapshot(self, index: UserIndex) -> None:
        writer = self.snapshots
        if writer is None or not snapshot.should_write(index.unsnapshotted, writer.min_rows):
            return
        # The job names the user, not the index: a queued job may wait long (the writer
        # lets bursts of loads pass first), and holding the index would keep it in memory
        # after eviction, outside the byte budget.
        key = (index.user_id, index.model)
        writer.schedule(*key, partial(self._export, key), partial(self._holds, key))

    def _holds(self, key: tuple[str, str | None]) -> bool:
        """Whether the user's index is still here: a snapshot job waiting its turn gives
        up once it is not."""
        with self._lock:
            return key in self._entries

    def _export(self, key: tuple[str, str | None]) -> snapshot.Export | None:
        """The snapshot job's export: from the user's index resident when the job runs —
        the one that scheduled it, or a later load of the user whose own request found
        this job still pending — and only when it holds rows the stored snapshot lacks.
        Nothing for a user evicted meanwhile: its next cold load schedules again."""
        with self._lock:
            index = self._entries.get(key)
        if index is None:
            return None
        with index.lock:
            writer = self.snapshots
            if writer is None or not snapshot.should_write(index.unsnapshotted, writer.min_rows):
                return None  # written by an earlier job since this one was queued
            return index.export()

    def __len__(self) -> int:
        return len(self._entries)


def _rows_may_be_gone(
    index: UserIndex, repo: EmbeddingRepository, state: IndexState, cold: bool, added: int
) -> bool:
    """Whether rows ``index`` holds may have been deleted: when every write since it was
    current counted its deletions, whether any were counted; otherwise (a writer that did
    not count, or an index just seeded from a snapshot, which carries no counts) whether
    held + added rows differ from the user's row count."""
    if not cold and state.counted_since(index.state):
        return state.removals != index.state.removals
    return len(index.rows) + added != repo.count()

"""Prometheus metrics, one registry per app (no process-wide default registry).

``GET /metrics`` serves, in the Prometheus text format:

- ``memstrata_http_requests_total{method, route, status}`` and
  ``memstrata_http_request_duration_seconds{method, route}`` (histogram). ``route`` is the
  route template (``/api/config/agent-files/{name}``), never the raw path, so user input
  cannot grow the label set; unmatched paths are ``<unmatched>``.
- ``memstrata_searches_total{mode}`` (``hybrid`` / ``bm25``) and
  ``memstrata_search_hits_total``.
- ``memstrata_sync_total{operation, result}``: ``provision`` (template → DB → sandbox on a
  user's first read) and ``frontend_edit`` (PUT: DB → embeddings → sandbox → AgentPool).
- ``memstrata_turns_indexed_total`` and ``memstrata_indexed_chunks_total``.
- ``memstrata_http_header_timeouts_total``: connections ``memstrata serve`` closed because
  their request headers had not all arrived within ``MEMSTRATA_HEADER_TIMEOUT_S``
  (api.header_timeout); a steady rise is clients too slow or a slowloris.
- ``memstrata_http_body_timeouts_total``: requests answered 408 because their body stopped
  arriving for ``MEMSTRATA_BODY_TIMEOUT_S`` (api.body_timeout).
- ``memstrata_search_cache_bytes`` / ``_budget_bytes`` / ``_users`` (gauges) and
  ``memstrata_search_cache_hits_total`` / ``_misses_total`` / ``_evictions_total`` /
  ``_snapshot_loads_total`` / ``_snapshot_writes_total`` / ``_snapshot_errors_total``:
  this process's per-user search indexes, read from the runtime at scrape time; with
  ``memstrata_search_cache_trims_total`` (the C allocator asked to return the pages
  loads and evictions freed).
- ``memstrata_query_embedding_cache_bytes`` / ``_budget_bytes`` / ``_entries`` (gauges):
  the query-embedding cache, whose bound is its share of the search cache's budget; its
  ``_hits_total`` / ``_misses_total`` come with the search stages.
- ``memstrata_gc_frozen_objects``: objects ``memstrata serve`` took out of the cyclic
  garbage collector's walks at start-up (``cli.serve.freeze_startup_heap``; 0 elsewhere).
- ``memstrata_embeddings_pending`` (rows waiting for a vector, all users),
  ``memstrata_embeddings_pending_oldest_seconds`` (how long the oldest has waited) and
  ``memstrata_embeddings_failed`` (rows marked as never embeddable): the re-embedding
  queue's cross-user count (retrieval.queue), read on every scrape. A scrape that cannot
  read it (the database down, the table locked past the count's timeout) has no sample of
  them, never the last value read: a stale count looks like a healthy one. No sample
  before the first read either, nor without the re-embedding worker. The count is the
  whole database's, the same on every replica: aggregate with ``max``, never ``sum``.
- ``memstrata_embedding_circuit_open{kind}``: 1 while this process skips the embedding
  API's ``passage`` (writes, re-embedding) or ``query`` (searches) server after repeated
  failures (one circuit for both when they are one server); read from the client at
  scrape time, no sample without an embedding API.
- ``memstrata_embedding_express_requests_total`` / ``_tokens_total``: passage requests
  (small writes' own) this process sent to the query server — the express slot, or the
  passage circuit open — and their estimated tokens: the work put beside the searches
  there (retrieval.embedding_plan); ``memstrata_embedding_express_deferred_total``: small
  writes kept off it, sent to the passage lane in their turn, because the express passages
  had used up their share of its time (retrieval.express_share); no sample without an
  embedding API.
- ``memstrata_turn_embeddings_deferred_total{write}``: passages of conversation turns stored
  without a vector because the write's budget ran out (retrieval.file_budget) or its client
  hung up (retrieval.embedding_provider.deadline_ends_when), by route: ``batch`` or
  ``turn``; no sample without an embedding API.
- ``memstrata_database_up``: 1 while the database monitor (db.monitor) finds the database
  reachable (a server with every connection slot taken included), 0 from ``db.lost`` to
  ``db.recovered``; no sample while no monitor runs (no runtime attached, or a host that
  never called ``start_background``).
- ``memstrata_database_pool_connections_in_use{pool}`` / ``_connections_limit{pool}``
  (gauges), ``memstrata_database_pool_waiting{pool}`` (checkouts waiting for a connection
  now), ``memstrata_database_pool_wait_seconds{pool}`` (histogram: every checkout, 0 when
  a connection was free or could be opened), ``memstrata_database_pool_timeouts_total`` and
  ``memstrata_database_pool_refused_total`` (waiting checkouts given up while the database
  monitor found the database lost, db.pool_watch.CheckoutGate: not timeouts): the
  SQLAlchemy pools, ``main`` (every session) and ``search_check`` (the check before each
  search, retrieval.state_reader), read at scrape time (db.pool_watch); no sample while no
  runtime is attached.
- ``memstrata_build_info{version, schema_head}``: always 1; which release this process
  runs and the schema revision it needs.

Other components increment these through the app's :class:`ApiMetrics` (the
``record_*`` methods), reachable as ``app.state.metrics``; what is read at scrape time
(``watch_*``) is read by the collectors of ``api.metrics_collectors``.

Counters and histograms come without their ``_created`` series (prometheus_client's
default adds one per labelled child, doubling the series count for a timestamp nobody
queries). They are dropped from this registry's exposition only: prometheus_client's
switch for it (``disable_created_metrics``) is process-wide, and would change the metrics
of a host app that mounts memstrata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from memstrata.api.metrics_collectors import (
    EmbeddingCollector,
    ExpressCollector,
    FrozenHeapCollector,
    PoolCollector,
    ProcessCollector,
    SearchCacheCollector,
    SearchStageCollector,
)
from memstrata.db.pool_watch import PoolStats
from memstrata.retrieval.cache import CacheStats
from memstrata.retrieval.embedding_plan import ExpressCounts
from memstrata.retrieval.search_stats import SearchStats

UNMATCHED_ROUTE = "<unmatched>"
# Up to a minute: a write may wait MEMSTRATA_EMBEDDING_BULK_WAIT_S (30 s) for a slot on the
# embedding API, then one passage request's timeout (5 + 8 × 1 s): 43 s with the defaults.
# Ending at 10 s put every inline batch import (21 s in a walkthrough) in +Inf.
_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0
)  # fmt: skip


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "memstrata_http_requests",
            "HTTP requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "memstrata_http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.searches = Counter(
            "memstrata_searches",
            "Memory searches by mode (hybrid, or bm25 without embeddings).",
            ["mode"],
            registry=self.registry,
        )
        self.search_hits = Counter(
            "memstrata_search_hits", "Results returned by memory searches.", registry=self.registry
        )
        self.sync = Counter(
            "memstrata_sync",
            "Sync operations started by the API, by operation and result.",
            ["operation", "result"],
            registry=self.registry,
        )
        self.turns_indexed = Counter(
            "memstrata_turns_indexed", "Conversation turns indexed.", registry=self.registry
        )
        self.chunks_indexed = Counter(
            "memstrata_indexed_chunks",
            "Chunks written while indexing conversation turns.",
            registry=self.registry,
        )
        self.header_timeouts = Counter(
            "memstrata_http_header_timeouts",
            "Connections closed because their request headers were late.",
            registry=self.registry,
        )
        self.body_timeouts = Counter(
            "memstrata_http_body_timeouts",
            "Requests answered 408 because their body stopped arriving.",
            registry=self.registry,
        )

        self._cache_source: Callable[[], CacheStats | None] | None = None
        self._search_source: Callable[[], SearchStats | None] | None = None
        self._database_source: Callable[[], bool | None] | None = None
        self._counts: dict[str, tuple[str, Callable[[], int | None], bool]] = {}
        self._labelled: dict[str, tuple[str, str, Callable[[], Mapping[str, int] | None]]] = {}
        self._circuits: Callable[[], Mapping[str, bool] | None] | None = None
        self._pools: Callable[[], Mapping[str, PoolStats] | None] | None = None
        self._backlog: tuple[int, float, int] | None = None  # as last read, for this scrape
        self.registry.register(SearchCacheCollector(self))
        self.registry.register(SearchStageCollector(self))
        self.registry.register(FrozenHeapCollector())
        self.registry.register(ProcessCollector(self))
        self.registry.register(EmbeddingCollector(self))
        self.registry.register(PoolCollector(self))
        self._express: Callable[[], ExpressCounts | None] | None = None
        self.registry.register(ExpressCollector(self))

    def watch_search_cache(self, source: Callable[[], CacheStats | None]) -> None:
        """Report the search cache's stats from ``source`` (None: no runtime attached)."""
        self._cache_source = source

    def watch_search(self, source: Callable[[], SearchStats | None]) -> None:
        """Report the search service's stage durations from ``source`` (None: no runtime)."""
        self._search_source = source

    def watch_database(self, source: Callable[[], bool | None]) -> None:
        """Report the database monitor's verdict from ``source`` (None: no sample)."""
        self._database_source = source

    def watch_count(
        self,
        name: str,
        help_text: str,
        source: Callable[[], int | None],
        *,
        total: bool = False,
    ) -> None:
        """Report a count read at scrape time as the gauge ``name`` (None: no sample): the
        embedding requests waiting for a slot, the MCP sessions open; ``total``: as the
        counter ``name``_total, a count that only grows (the passages file writes left to
        the background worker)."""
        self._counts[name] = (help_text, source, total)

    def watch_totals(
        self,
        name: str,
        help_text: str,
        label: str,
        source: Callable[[], Mapping[str, int] | None],
    ) -> None:
        """Report counts read at scrape time (label value → count, None: no sample) as the
        counter ``name``_total with one series per ``label`` value: the passages of turns
        the writes' budgets left to the background worker, by route."""
        self._labelled[name] = (help_text, label, source)

    def watch_circuits(self, source: Callable[[], Mapping[str, bool] | None]) -> None:
        """Report whether each embedding circuit is open (kind → open) from ``source``
        (None: no sample)."""
        self._circuits = source

    def watch_express(self, source: Callable[[], ExpressCounts | None]) -> None:
        """Report the passage requests sent to the query server, their tokens and the small
        writes deferred, from ``source`` (None: no sample)."""
        self._express = source

    def watch_pools(self, source: Callable[[], Mapping[str, PoolStats] | None]) -> None:
        """Report the database pools (pool name → its state) from ``source`` (None: no
        sample)."""
        self._pools = source

    def record_backlog(self, pending: int, oldest_s: float, failed: int) -> None:
        """The backlog as just read (``/readyz``, or a scrape before it renders)."""
        self._backlog = (pending, oldest_s, failed)

    def forget_backlog(self) -> None:
        """No backlog sample until it is read again: what a scrape does first, so that one
        that cannot read it reports nothing rather than the last count."""
        self._backlog = None

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method=method, route=route, status=str(status)).inc()
        self.latency.labels(method=method, route=route).observe(seconds)

    def record_search(self, mode: str, hits: int) -> None:
        self.searches.labels(mode=mode).inc()
        self.search_hits.inc(hits)

    def record_sync(self, operation: str, result: str) -> None:
        self.sync.labels(operation=operation, result=result).inc()

    def record_turn_indexed(self, chunks_written: int) -> None:
        self.turns_indexed.inc()
        self.chunks_indexed.inc(chunks_written)

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its content type."""
        return generate_latest(_WithoutCreated(self.registry)), CONTENT_TYPE_LATEST


class _WithoutCreated(Collector):
    """``registry``'s metrics without the ``_created`` samples of counters and histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            created = f"{metric.name}_created"
            if any(sample.name == created for sample in metric.samples):
                kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                kept.samples = [sample for sample in metric.samples if sample.name != created]
                metric = kept
            yield metric

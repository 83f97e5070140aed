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
  without a vector because the write's budget ran out (retrieval.file_budget), by route:
  ``batch`` or ``turn``; no sample without an embedding API.
- ``memstrata_database_up``: 1 while the database monitor (db.monitor) finds the database
  reachable (a server with every connection slot taken included), 0 from ``db.lost`` to
  ``db.recovered``; no sample while no monitor runs (no runtime attached, or a host that
  never called ``start_background``).
- ``memstrata_database_pool_connections_in_use{pool}`` / ``_connections_limit{pool}``
  (gauges), ``memstrata_database_pool_waiting{pool}`` (checkouts waiting for a connection
  now), ``memstrata_database_pool_wait_seconds{pool}`` (histogram: every checkout, 0 when
  a connection was free or could be opened) and ``memstrata_database_pool_timeouts_total``:
  the SQLAlchemy pools, ``main`` (every session) and ``search_check`` (the check before
  each search, retrieval.state_reader), read at scrape time (db.pool_watch); no sample
  while no runtime is attached.
- ``memstrata_build_info{version, schema_head}``: always 1; which release this process
  runs and the schema revision it needs.

Other components increment these through the app's :class:`ApiMetrics` (the
``record_*`` methods), reachable as ``app.state.metrics``.

Counters and histograms come without their ``_created`` series (prometheus_client's
default adds one per labelled child, doubling the series count for a timestamp nobody
queries). They are dropped from this registry's exposition only: prometheus_client's
switch for it (``disable_created_metrics``) is process-wide, and would change the metrics
of a host app that mounts memstrata.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from memstrata import package_version
from memstrata.db.engine import POOL_TIMEOUT_S
from memstrata.db.migrate import schema_head
from memstrata.db.pool_watch import OVERFLOW_PER_POOLED, WAIT_BUCKETS_S, PoolStats
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
# The embedding API's servers a circuit guards: the label values of
# memstrata_embedding_circuit_open.
CIRCUIT_KINDS = ("passage", "query")


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
        self.registry.register(_SearchCacheCollector(self))
        self.registry.register(_SearchStageCollector(self))
        self.registry.register(_FrozenHeapCollector())
        self.registry.register(_ProcessCollector(self))
        self.registry.register(_EmbeddingCollector(self))
        self.registry.register(_PoolCollector(self))
        self._express: Callable[[], ExpressCounts | None] | None = None
        self.registry.register(_ExpressCollector(self))

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


class _EmbeddingCollector(Collector):
    """The re-embedding backlog as last read, and the embedding circuits at scrape time."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        backlog = self._metrics._backlog
        if backlog is not None:
            pending, oldest_s, failed = backlog
            yield GaugeMetricFamily(
                "memstrata_embeddings_pending",
                "Rows waiting for a vector of the current model (all users: the same on "
                "every replica, aggregate with max).",
                value=pending,
            )
            yield GaugeMetricFamily(
                "memstrata_embeddings_pending_oldest_seconds",
                "Seconds since the oldest row still waiting for a vector was written.",
                value=oldest_s,
            )
            yield GaugeMetricFamily(
                "memstrata_embeddings_failed",
                "Rows whose text the embedding API rejected for good (never retried).",
                value=failed,
            )
        source = self._metrics._circuits
        circuits = source() if source is not None else None
        if circuits is None:
            return
        family = GaugeMetricFamily(
            "memstrata_embedding_circuit_open",
            "1 while this process skips the embedding API's passage or query server after "
            "repeated failures.",
            labels=["kind"],
        )
        for kind in CIRCUIT_KINDS:
            if kind in circuits:
                family.add_metric([kind], 1 if circuits[kind] else 0)
        yield family


class _ExpressCollector(Collector):
    """The embedding client's express counts at scrape time (the client owns them)."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        source = self._metrics._express
        counts = source() if source is not None else None
        if counts is None:
            return
        requests, tokens, deferred = counts
        yield CounterMetricFamily(
            "memstrata_embedding_express_requests",
            "Passage requests (small writes) sent to the query server: the express slot, or "
            "the passage server's circuit open.",
            value=requests,
        )
        yield CounterMetricFamily(
            "memstrata_embedding_express_tokens",
            "Estimated tokens of the passage requests sent to the query server.",
            value=tokens,
        )
        yield CounterMetricFamily(
            "memstrata_embedding_express_deferred",
            "Small writes kept off the query server (sent to the passage lane in their turn): "
            "the express passages had used up their share of its time.",
            value=deferred,
        )


class _PoolCollector(Collector):
    """The database pools at scrape time: how full, and how long checkouts waited."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        source = self._metrics._pools
        pools = source() if source is not None else None
        if not pools:
            return
        labels = ["pool"]
        in_use = GaugeMetricFamily(
            "memstrata_database_pool_connections_in_use",
            "Connections of the pool checked out now.",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "memstrata_database_pool_connections_limit",
            "The most connections the pool opens at once (its size plus overflow; "
            f"MEMSTRATA_DB_POOL_SIZE × {1 + OVERFLOW_PER_POOLED} for main).",
            labels=labels,
        )
        waiting = GaugeMetricFamily(
            "memstrata_database_pool_waiting",
            "Checkouts waiting now for a connection of the pool (every one in use).",
            labels=labels,
        )
        waits = HistogramMetricFamily(
            "memstrata_database_pool_wait_seconds",
            "Time each checkout waited for a connection (0 when one was free or could be opened).",
            labels=labels,
        )
        timeouts = CounterMetricFamily(
            "memstrata_database_pool_timeouts",
            f"Checkouts that waited the pool timeout ({POOL_TIMEOUT_S:g} s) and got no "
            "connection (a 503).",
            labels=labels,
        )
        for name, stats in pools.items():
            in_use.add_metric([name], stats.in_use)
            limit.add_metric([name], stats.limit)
            waiting.add_metric([name], stats.waiting)
            buckets = [(str(b), n) for b, n in zip(WAIT_BUCKETS_S, stats.wait_buckets, strict=True)]
            waits.add_metric(
                [name], [*buckets, ("+Inf", stats.checkouts)], sum_value=stats.wait_sum_s
            )
            timeouts.add_metric([name], stats.timeouts)
        yield from (in_use, limit, waiting, waits, timeouts)


class _ProcessCollector(Collector):
    """This process's release, and its database monitor's verdict at scrape time."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "memstrata_build_info",
            "Always 1: the release this process runs and the schema revision it expects.",
            labels=["version", "schema_head"],
        )
        info.add_metric([package_version(), schema_head() or ""], 1)
        yield info
        for name, (help_text, count, total) in list(self._metrics._counts.items()):
            value = count()
            if value is not None:
                family = CounterMetricFamily if total else GaugeMetricFamily
                yield family(name, help_text, value=value)
        for name, (help_text, label, counts) in list(self._metrics._labelled.items()):
            values = counts()
            if values is not None:
                labelled = CounterMetricFamily(name, help_text, labels=[label])
                for key, value in values.items():
                    labelled.add_metric([key], value)
                yield labelled
        source = self._metrics._database_source
        up = source() if source is not None else None
        if up is not None:
            yield GaugeMetricFamily(
                "memstrata_database_up",
                "1 while the database monitor reaches the database (saturated too), 0 once "
                "it is lost (db.lost) until it recovers.",
                value=1 if up else 0,
            )


class _FrozenHeapCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "memstrata_gc_frozen_objects",
            "Objects kept out of the cyclic garbage collector's walks (gc.freeze at start-up).",
            value=gc.get_freeze_count(),
        )


class _SearchStageCollector(Collector):
    """Reads the search service's stage histograms at scrape time (every entry point's
    searches: HTTP, MCP, agent tools)."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        source = self._metrics._search_source
        stats = source() if source is not None else None
        if stats is None:
            return
        yield from stats.stages
        yield CounterMetricFamily(
            "memstrata_query_embedding_cache_hits",
            "Query embeddings answered from the in-process cache (no embedding API call).",
            value=stats.query_cache_hits,
        )
        yield CounterMetricFamily(
            "memstrata_query_embedding_cache_misses",
            "Query embeddings asked of the embedding API.",
            value=stats.query_cache_misses,
        )


class _SearchCacheCollector(Collector):
    """Reads the cache's counters at scrape time: the cache owns them, nothing is copied."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        source = self._metrics._cache_source
        stats = source() if source is not None else None
        if stats is None:
            return
        yield GaugeMetricFamily(
            "memstrata_search_cache_bytes",
            "Resident bytes charged for this process's per-user search indexes.",
            value=stats.bytes,
        )
        if stats.max_bytes is not None:
            yield GaugeMetricFamily(
                "memstrata_search_cache_budget_bytes",
                "MEMSTRATA_SEARCH_CACHE_BYTES: the byte budget of the search caches.",
                value=stats.max_bytes,
            )
        yield GaugeMetricFamily(
            "memstrata_search_cache_users", "Users whose search index is held.", value=stats.users
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_hits",
            "Searches that found the user's index in memory.",
            value=stats.hits,
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_misses",
            "Searches that had to load the user's index from the database.",
            value=stats.misses,
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_evictions",
            "Indexes dropped to stay within the user count or the byte budget.",
            value=stats.evictions,
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_snapshot_loads",
            "Cold index loads that started from the user's stored index snapshot.",
            value=stats.snapshot_loads,
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_snapshot_writes",
            "Index snapshots this process stored.",
            value=stats.snapshot_writes,
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_snapshot_errors",
            "Unreadable index snapshots (the rows were loaded instead) and failed writes.",
            value=stats.snapshot_errors,
        )
        yield CounterMetricFamily(
            "memstrata_search_cache_trims",
            "Times loads and evictions freed enough that the C allocator was asked to "
            "return pages.",
            value=stats.trims,
        )
        queries = stats.queries
        if queries is None:
            return
        yield GaugeMetricFamily(
            "memstrata_query_embedding_cache_bytes",
            "Bytes held by the query-embedding cache (vectors, texts, entries).",
            value=queries.bytes,
        )
        if queries.max_bytes is not None:
            yield GaugeMetricFamily(
                "memstrata_query_embedding_cache_budget_bytes",
                "The query-embedding cache's bound: its share of MEMSTRATA_SEARCH_CACHE_BYTES.",
                value=queries.max_bytes,
            )
        yield GaugeMetricFamily(
            "memstrata_query_embedding_cache_entries",
            "Query embeddings held (keyed by user, model and text).",
            value=queries.entries,
        )

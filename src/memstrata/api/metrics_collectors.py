"""The collectors ``/metrics`` reads the runtime's state through at scrape time.

``ApiMetrics`` (``api.metrics``) owns the registry and the counters components increment;
the values here are owned elsewhere (the search cache, the embedding client, the database
pools and monitor, the re-embedding backlog) and read only when scraped, through the
sources the runtime hands to ``ApiMetrics.watch_*``, so nothing is copied or left stale.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from memstrata import package_version
from memstrata.db.engine import POOL_TIMEOUT_S
from memstrata.db.migrate import schema_head
from memstrata.db.pool_watch import OVERFLOW_PER_POOLED, WAIT_BUCKETS_S

if TYPE_CHECKING:
    from memstrata.api.metrics import ApiMetrics

# The embedding API's servers a circuit guards: the label values of
# memstrata_embedding_circuit_open.
CIRCUIT_KINDS = ("passage", "query")


class EmbeddingCollector(Collector):
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


class ExpressCollector(Collector):
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


class PoolCollector(Collector):
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
        refused = CounterMetricFamily(
            "memstrata_database_pool_refused",
            "Checkouts waiting for a connection that were given up (a 503) because the "
            "database monitor found the database lost; not counted in the timeouts.",
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
            refused.add_metric([name], stats.refused)
        yield from (in_use, limit, waiting, waits, timeouts, refused)


class ProcessCollector(Collector):
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


class FrozenHeapCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "memstrata_gc_frozen_objects",
            "Objects kept out of the cyclic garbage collector's walks (gc.freeze at start-up).",
            value=gc.get_freeze_count(),
        )


class SearchStageCollector(Collector):
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


class SearchCacheCollector(Collector):
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

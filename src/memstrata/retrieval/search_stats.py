"""How long searches spend embedding the query and searching, counted where they run.

A search's latency is mostly its query embedding (docs/BENCHMARKS.md): a platform needs to
see that split in production, not only in the benchmark, and for every entry point (HTTP,
MCP, agent tools, library) — so ``SearchService.search`` counts it, in a prometheus_client
histogram that belongs to no registry, and ``/metrics`` reads it at scrape time, as it
reads the search cache's counters.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Histogram
from prometheus_client.metrics_core import Metric

# Upper bounds in seconds: a cached query embedding is ~0, a search 1–10 ms, a query
# embedding 10–70 ms, a cold load of a large user up to seconds.
STAGE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STAGES = ("embed", "search")


def stage_histogram() -> Histogram:
    """``memstrata_search_stage_seconds{stage}``, both stages shown from the start."""
    histogram = Histogram(
        "memstrata_search_stage_seconds",
        "Time of each search spent embedding the query (embed) and searching (search).",
        ["stage"],
        buckets=STAGE_BUCKETS_S,
        registry=None,
    )
    for stage in STAGES:
        histogram.labels(stage=stage)
    return histogram


@dataclass(frozen=True)
class SearchStats:
    stages: list[Metric]  # the histogram's samples, as collected
    query_cache_hits: int
    query_cache_misses: int

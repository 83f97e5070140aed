"""How long searches spend embedding the query and searching, counted where they run.

A search's latency is mostly its query embedding (docs/BENCHMARKS.md): a platform needs to
see that split in production, not only in the benchmark, and for every entry point (HTTP,
MCP, agent tools, library) — so ``SearchService.search`` counts it, and ``/metrics`` reads
the counts at scrape time, as it reads the search cache's.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

# Upper bounds in seconds: a cached query embedding is ~0, a search 1–10 ms, a query
# embedding 10–70 ms, a cold load of a large user up to seconds.
STAGE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STAGES = ("embed", "search")


@dataclass(frozen=True)
class StageHistogram:
    """Prometheus-shaped: ``cumulative[i]`` observations ≤ ``STAGE_BUCKETS_S[i]``."""

    cumulative: tuple[int, ...]
    count: int
    sum_s: float


@dataclass(frozen=True)
class SearchStats:
    stages: dict[str, StageHistogram]
    query_cache_hits: int
    query_cache_misses: int


class StageTimes:
    """Thread-safe histograms of the stages' durations."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {stage: [0] * (len(STAGE_BUCKETS_S) + 1) for stage in STAGES}
        self._sums = dict.fromkeys(STAGES, 0.0)

    def observe(self, stage: str, seconds: float) -> None:
        slot = bisect.bisect_left(STAGE_BUCKETS_S, seconds)  # a bucket's bound is inclusive
        with self._lock:
            self._counts[stage][slot] += 1
            self._sums[stage] += seconds

    def histograms(self) -> dict[str, StageHistogram]:
        with self._lock:
            counts = {stage: list(c) for stage, c in self._counts.items()}
            sums = dict(self._sums)
        out = {}
        for stage, per_bucket in counts.items():
            running, cumulative = 0, []
            for n in per_bucket[:-1]:
                running += n
                cumulative.append(running)
            out[stage] = StageHistogram(tuple(cumulative), sum(per_bucket), sums[stage])
        return out

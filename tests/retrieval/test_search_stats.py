"""The stage histogram behind ``memstrata_search_stage_seconds``."""

from __future__ import annotations

import threading

from prometheus_client import Histogram

from memstrata.retrieval.search_stats import STAGES, stage_histogram


def _samples(histogram: Histogram) -> dict[tuple[str, str, str], float]:
    """(sample name, stage, le) -> value, from what a scrape collects."""
    out = {}
    for metric in histogram.collect():
        for s in metric.samples:
            out[(s.name, s.labels["stage"], s.labels.get("le", ""))] = s.value
    return out


def test_observations_land_in_cumulative_buckets_with_inclusive_bounds() -> None:
    times = stage_histogram()
    for seconds in (0.0, 0.001, 0.0011, 0.02, 7.0):
        times.labels(stage="search").observe(seconds)
    times.labels(stage="embed").observe(0.016)
    got = _samples(times)
    bucket = "memstrata_search_stage_seconds_bucket"
    assert got[("memstrata_search_stage_seconds_count", "search", "")] == 5
    assert abs(got[("memstrata_search_stage_seconds_sum", "search", "")] - 7.0221) < 1e-9
    assert got[(bucket, "search", "0.001")] == 2  # 0.0 and exactly 0.001
    assert got[(bucket, "search", "0.0025")] == 3
    assert got[(bucket, "search", "0.025")] == 4
    assert got[(bucket, "search", "5.0")] == 4  # 7 s is only in +Inf
    assert got[(bucket, "search", "+Inf")] == 5
    assert got[("memstrata_search_stage_seconds_count", "embed", "")] == 1
    assert got[(bucket, "embed", "0.025")] == 1


def test_both_stages_are_shown_before_any_search() -> None:
    got = _samples(stage_histogram())
    for stage in STAGES:
        assert got[("memstrata_search_stage_seconds_count", stage, "")] == 0


def test_concurrent_observations_are_all_counted() -> None:
    times = stage_histogram()

    def work() -> None:
        for _ in range(2000):
            times.labels(stage="search").observe(0.003)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _samples(times)[("memstrata_search_stage_seconds_count", "search", "")] == 8000

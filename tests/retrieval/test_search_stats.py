"""The stage histograms behind ``memstrata_search_stage_seconds`` (pure)."""

from __future__ import annotations

import threading

from memstrata.retrieval.search_stats import STAGE_BUCKETS_S, StageTimes


def test_observations_land_in_cumulative_buckets_with_inclusive_bounds() -> None:
    times = StageTimes()
    for seconds in (0.0, 0.001, 0.0011, 0.02, 7.0):
        times.observe("search", seconds)
    times.observe("embed", 0.016)
    hist = times.histograms()
    search = hist["search"]
    assert search.count == 5
    assert abs(search.sum_s - 7.0221) < 1e-9
    by_bound = dict(zip(STAGE_BUCKETS_S, search.cumulative, strict=True))
    assert by_bound[0.001] == 2  # 0.0 and exactly 0.001
    assert by_bound[0.0025] == 3
    assert by_bound[0.025] == 4
    assert by_bound[5.0] == 4  # 7 s is only in +Inf, which is the count
    assert hist["embed"].count == 1
    assert dict(zip(STAGE_BUCKETS_S, hist["embed"].cumulative, strict=True))[0.025] == 1
    assert list(search.cumulative) == sorted(search.cumulative)


def test_concurrent_observations_are_all_counted() -> None:
    times = StageTimes()

    def work() -> None:
        for _ in range(2000):
            times.observe("search", 0.003)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert times.histograms()["search"].count == 8000

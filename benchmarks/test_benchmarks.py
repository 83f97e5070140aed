"""Slow benchmarks (``make bench``), excluded from ``make test`` by the ``slow`` marker.

They drive the same CLI a person runs and check the printed JSON's shape; the figures
themselves go into docs/BENCHMARKS.md through ``benchmarks/run.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A LoCoMo-format JSON file (snap-research/locomo, CC BY-NC 4.0), not shipped with the repo.
LOCOMO = Path(os.environ.get("MEMSTRATA_LOCOMO", "locomo-dev.json"))
CLI = [sys.executable, "-m", "memstrata.cli"]


def last_json(stdout: str) -> dict[str, object]:
    return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_locomo_recall() -> None:
    if not LOCOMO.is_file():
        pytest.fail(f"LoCoMo data not found at {LOCOMO}; set MEMSTRATA_LOCOMO to its path")
    out = subprocess.run(
        [*CLI, "bench", "locomo", str(LOCOMO)],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    result = last_json(out.stdout)
    # At least the variants the issue names; the bench prints more (floors, convex, peers).
    assert {"bm25", "vector", "hybrid", "hybrid_spec_decay"} <= set(result["recall"])  # type: ignore[arg-type]


@pytest.mark.slow
def test_latency_10k() -> None:
    out = subprocess.run(
        [*CLI, "bench", "latency", "--chunks", "10000", "--others", "200000"],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    result = last_json(out.stdout)
    for key in ("p50_ms", "p95_ms", "baseline_p50_ms", "baseline_p95_ms"):
        assert isinstance(result[key], float)

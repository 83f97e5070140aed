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
from typing import Any, cast

import pytest

from memstrata.serve_process import free_port

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


LONG_LIFE = [sys.executable, str(Path(__file__).with_name("long_life.py"))]


@pytest.mark.slow
def test_long_life_recall() -> None:
    out = subprocess.run(
        [*LONG_LIFE, "--sessions", "8", "--checkpoints", "4", "8"],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    points = cast(list[dict[str, Any]], last_json(out.stdout)["checkpoints"])
    assert [p["session"] for p in points] == [4, 8]
    for point in points:
        assert set(point["recall"]) == {
            "memory/decay",
            "memory/no_decay",
            "all/decay",
            "all/no_decay",
        }
        for by_k in point["recall"].values():
            assert 0 <= by_k["@5"] <= by_k["@10"] <= 1
        assert point["memory_md_chunks"] >= 1 and point["record_memory_ms"]["calls"] >= 8


@pytest.mark.slow
def test_long_life_prints_no_figures_for_rows_without_vectors() -> None:
    """An embedding API that is not there: every row is stored without a vector, and the
    run stops at its first checkpoint instead of reporting BM25-only recall."""
    env = dict(
        os.environ,
        MEMSTRATA_EMBEDDING_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
        MEMSTRATA_EMBEDDING_MODEL="absent-model",
    )
    done = subprocess.run(
        [*LONG_LIFE, "--sessions", "2", "--checkpoints", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode != 0
    assert "have no vector; no figures" in done.stderr
    assert "recall" not in done.stdout

"""Slow benchmarks (``make bench``), excluded from ``make test`` by the ``slow`` marker.

They drive the same CLI a person runs and check the printed JSON's shape; the figures
themselves go into docs/BENCHMARKS.md through ``benchmarks/run.py``.
"""

from __future__ import annotations

import importlib.util
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


DIVERSITY = [sys.executable, str(Path(__file__).with_name("diversity.py"))]


def tiny_locomo(path: Path) -> None:
    """Two sessions of one conversation in LoCoMo's format: three turns of one topic, near
    duplicates, and the other topics once; questions naming one or two evidence turns."""
    said = [
        "I adopted a grey kitten named Miso last week.",
        "Miso the grey kitten sleeps on my keyboard all day.",
        "My grey kitten Miso knocked my coffee off the desk.",
        "I started learning the cello in March.",
        "We hiked to the lake above the village on Sunday.",
        "My sister moved to Lisbon for a job at a bakery.",
    ]
    turns = [{"speaker": "Ana", "dia_id": f"D1:{i + 1}", "text": t} for i, t in enumerate(said)]
    later = [{"speaker": "Ana", "dia_id": "D2:1", "text": "The cello teacher says I improve."}]
    qa = [
        {"question": "What is the kitten called?", "evidence": ["D1:1"], "category": 4},
        {
            "question": "Which instrument and which city?",
            "evidence": ["D1:4", "D1:6"],
            "category": 1,
        },
        {"question": "What does the cello teacher say?", "evidence": ["D2:1"], "category": 4},
    ]
    conversation = {
        "speaker_a": "Ana",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": turns,
        "session_2_date_time": "10:00 am on 2 June, 2023",
        "session_2": later,
    }
    path.write_text(json.dumps([{"sample_id": "tiny", "conversation": conversation, "qa": qa}]))


@pytest.mark.slow
def test_diversity_rankings_are_pure() -> None:
    """MMR at λ = 1 is the fused order and picks a second topic over a near duplicate at
    λ = 0.5; near-duplicate removal skips the copy and puts it back when places are left."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import numpy as np

    from benchmarks.diversity import dedup, mmr, normalised

    unit = np.array([[1, 0], [0.99, 0.141], [0, 1]], dtype=np.float32)
    rel = normalised([3.0, 2.9, 1.0])
    assert rel == [1.0, 0.95, 0.0]
    assert mmr(rel, unit, 3, 1.0) == [0, 1, 2]
    assert mmr(rel, unit, 2, 0.5) == [0, 2]
    assert dedup(unit, 2, 0.95) == [0, 2]
    assert dedup(unit, 3, 0.95) == [0, 2, 1]
    assert dedup(unit[:2], 2, 0.95) == [0, 1]


@pytest.mark.slow
def test_diversity_script(tmp_path: Path) -> None:
    """The script end to end on a tiny LoCoMo-format file (its own check against the
    harness's rows included), its ``decide`` on the saved scores, and ``cost``."""
    data, saved = tmp_path / "tiny.json", tmp_path / "tiny-scores.json"
    tiny_locomo(data)
    run = subprocess.run(
        [*DIVERSITY, "locomo", str(data), "--out", str(saved)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    lines = run.stdout.splitlines()
    rows = {line.split()[0] for line in lines if line.startswith("  ") and "@10," not in line}
    variants = ["mmr_l0.9", "mmr_l0.8", "mmr_l0.7", "mmr_l0.5", "dedup_t0.95", "dedup_t0.9"]
    assert rows == {"hybrid", "hybrid_spec_decay", *variants} | {
        f"{v}_spec_decay" for v in variants
    }
    assert any(line.startswith("  @10, decay off, category 1 (1): hybrid") for line in lines)
    table = json.loads(saved.read_text())["table"]["fraction"]
    assert len(table["hybrid"]["5"]) == 3
    decided = subprocess.run(
        [*DIVERSITY, "decide", str(saved), str(saved)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    verdicts = decided.stdout.split("the rule")[1].splitlines()[1:]
    assert [line.split()[0] for line in verdicts] == variants
    cost = subprocess.run(
        [*DIVERSITY, "cost", "--chunks", "200", "--searches", "20"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    assert cost.stdout.count("mmr_l0.5") == 2 and "decay off: 200 rows" in cost.stdout


SOAK = [sys.executable, str(Path(__file__).parent / "load" / "soak.py")]


@pytest.mark.slow
def test_soak_smoke(tmp_path: Path) -> None:
    """The soak end to end for a few seconds on a tiny LoCoMo-format file: every request
    kind of its mix is sent and answered, and every sampled figure gets both windows."""
    # Looked up, not imported: importing Locust monkey-patches this process (gevent).
    if importlib.util.find_spec("locust") is None:
        pytest.skip("the soak needs Locust: pip install -e '.[load]'")
    data = tmp_path / "tiny.json"
    tiny_locomo(data)
    work = tmp_path / "work"
    tiny = ["--users", "8", "--pool-rounds", "20", "--median-rounds", "6"]
    short = ["--warmup", "3", "--minutes", "0.3", "--span", "6", "--interval", "1"]
    run = subprocess.run(
        [*SOAK, "--locomo", str(data), *tiny, *short, "--work-dir", str(work)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result = last_json(run.stdout)
    latency = cast(dict[str, dict[str, Any]], result["latency"])
    assert {
        "POST search",
        "POST ingest turn",
        "POST ingest batch (5 turns)",
        "GET read file",
        "PUT write file (If-Match)",
        "POST mcp initialize",
        "POST mcp memory_search",
        "DELETE mcp DELETE",
        "GET web page",
        "GET web asset",
    } <= set(latency)
    assert all(f["failed"] == 0 for f in latency.values())
    saved = json.loads((work / "soak.json").read_text())
    for name, figure in saved["figures"].items():
        assert figure["first"] and figure["last"], name
        assert figure["verdict"] in {"steady", "growing", "shrinking"}
    assert saved["last_sample"]["pg_backends"] >= 1 and saved["last_sample"]["fds"] > 0
    assert len(saved["per_minute"]["POST search"]) == 1

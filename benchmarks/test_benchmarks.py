"""The benchmarks' own tests. The long runs (``slow``: real data, minutes of embedding,
Locust) run with ``make bench``; the rest — the scripts' pure parts, their runs on tiny
synthetic data, a run that must stop without figures when its rows have no vectors — with
``make test``, since a benchmark that silently breaks reports wrong numbers.

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


def saved_run(
    name: str, scores: list[str], cells: dict[str, list[float]], **extra: Any
) -> dict[str, Any]:
    """A script's saved run of one set: each row's scores @5 and @10 (one question), in
    each of ``scores``, with the script's own ``extra`` keys."""
    return {
        "dataset": name,
        "scores": scores,
        "table": {
            how: {row: {"5": [v[0]], "10": [v[1]]} for row, v in cells.items()} for how in scores
        },
        **extra,
    }


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


SPARSE_HEAD = [sys.executable, str(Path(__file__).with_name("sparse_head.py"))]


def test_sparse_head_pure_parts(tmp_path: Path) -> None:
    """The sparse list keeps the allowed rows sharing a feature with the query, ties in
    key order; three-way RRF is ``fuse`` with the third list empty, and a row the third
    list alone finds first joins the fused order; the cache reads back what it wrote."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import numpy as np

    from benchmarks.sparse_head import SparseCache, doc_matrix, fuse_three, sparse_ranking
    from memstrata.retrieval.fusion import fuse
    from memstrata.retrieval.ranking import DecayPolicy

    def vec(ids: list[int], weights: list[float]) -> tuple[np.ndarray, np.ndarray]:
        return np.array(ids, np.int32), np.array(weights, np.float32)

    docs = [vec([0, 3], [1.0, 1.0]), vec([3], [2.0]), vec([1], [5.0]), vec([0], [1.0])]
    matrix = doc_matrix(docs, 4)
    query = vec([0, 3], [1.0, 0.5])
    keys = [10, 11, 12, 13]
    assert sparse_ranking(keys, matrix, query, None, 10) == [10, 11, 13]
    assert sparse_ranking(keys, matrix, query, {11, 12, 13}, 10) == [11, 13]
    assert sparse_ranking(keys, matrix, query, None, 1) == [10]

    ages = {k: float(k) * 20 for k in range(8)}
    resident = {7: True}
    for decay in (DecayPolicy(enabled=False), DecayPolicy(True, 30.0, 0.0)):
        for pool in (None, 2, 30):  # None: decay over every key, the product's default
            bm25, vector = [1, 2, 3, 7], [3, 4, 1, 5]
            want = fuse(
                bm25,
                vector,
                k=60,
                ages_days=ages,
                resident=resident,
                half_life_days=30.0,
                decay=decay.enabled,
                pool=pool,
            )
            got = fuse_three(
                (bm25, vector, []),
                k=60,
                top_k=10,
                ages_days=ages,
                resident=resident,
                decay=decay,
                pool=pool,
            )
            assert got == [f.key for f in want]
    no_decay = DecayPolicy(enabled=False)
    three = fuse_three(
        ([1, 2], [2, 1], [6, 2]), k=60, top_k=3, ages_days={}, resident={}, decay=no_decay, pool=30
    )
    assert three == [2, 1, 6]  # 2: three lists; 1: two; 6: one, at rank 1

    cache = SparseCache(tmp_path, "tiny")
    cache.vectors = {"a": vec([5, 2], [0.5, 0.25]), "b": vec([], [])}
    cache.computed = 2
    cache.save()
    again = SparseCache(tmp_path, "tiny")
    assert set(again.vectors) == {"a", "b"}
    assert again.vectors["a"][0].tolist() == [5, 2] and again.vectors["b"][0].size == 0
    assert again.get(["a"])[0][1].tolist() == [0.5, 0.25] and again.made == 0


def test_sparse_head_script(tmp_path: Path) -> None:
    """The script end to end on a tiny LoCoMo-format file (its own checks against the
    harness's rows and ``fuse`` included), twice: the second run computes no sparse
    vector; ``decide`` on the saved scores gives every variant a verdict."""
    data, saved, cache = tmp_path / "tiny.json", tmp_path / "scores.json", tmp_path / "sparse"
    tiny_locomo(data)
    command = [*SPARSE_HEAD, "locomo", str(data), "--sparse-cache", str(cache), "--out", str(saved)]
    runs = [
        subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
        for _ in range(2)
    ]
    assert "sparse vectors computed: 10" in runs[0].stderr  # 7 rows, 3 questions
    assert "sparse vectors computed: 0" in runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
    rows = {line.split()[0] for line in runs[0].stdout.splitlines() if line.startswith("  ")}
    variants = {"sparse", "rrf3", "sparse_for_bm25"}
    assert rows - {"@10,"} == {"bm25", "vector", "hybrid", "hybrid_spec_decay"} | variants | {
        f"{v}_spec_decay" for v in variants
    }
    table = json.loads(saved.read_text())["table"]["fraction"]
    assert len(table["rrf3"]["10"]) == 3
    assert table["sparse"]["10"][0] == 1.0  # "What is the kitten called?" finds D1:1
    decided = subprocess.run(
        [*SPARSE_HEAD, "decide", str(saved)], capture_output=True, text=True, check=True, timeout=60
    )
    verdicts = decided.stdout.split("the rule on locomo:")[1].splitlines()[1:]
    assert [line.split()[0] for line in verdicts] == ["sparse", "rrf3", "sparse_for_bm25"]
    assert all("pursuing" in line for line in verdicts)


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


def test_neighbour_context_pure_parts() -> None:
    """A round's context texts: the product's own row text rebuilt, the neighbours of its
    session only and in reading order, a gap ending the run, the 512-token limit kept with
    the round whole; and the decision rule reads every cell and the target cells."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from datetime import UTC, datetime

    from benchmarks.neighbour_context import context_text, head_within, row_texts, verdict
    from memstrata.retrieval.rounds import Round
    from memstrata.retrieval.tokenize import count_tokens

    when = datetime(2024, 1, 1, tzinfo=UTC)
    said = ["Did you go?", "Yes, last Friday!", "How was it?", "Loud."]
    rounds = [Round("s1", n, t, "", when) for n, t in enumerate(said)]
    rounds += [Round("s2", 0, "Other session.", "", when), Round("s1", 6, "After a gap.", "", when)]
    texts = row_texts(rounds, ["ctx_prev1", "ctx_prev2", "ctx_prev1_next1"])
    assert texts["sessions/s1/1"]["product"] == "User: Did you go?\nUser: Yes, last Friday!"
    assert texts["sessions/s1/1"]["ctx_prev1"] == texts["sessions/s1/1"]["product"]
    assert (
        texts["sessions/s1/3"]["ctx_prev2"]
        == "User: Yes, last Friday!\nUser: How was it?\nUser: Loud."
    )
    assert texts["sessions/s1/2"]["ctx_prev1_next1"] == texts["sessions/s1/3"]["ctx_prev2"]
    assert texts["sessions/s1/3"]["ctx_prev1_next1"] == "User: How was it?\nUser: Loud."
    assert texts["sessions/s2/0"]["ctx_prev2"] == "User: Other session."
    assert texts["sessions/s1/6"]["ctx_prev1_next1"] == "User: After a gap."
    long = " ".join(f"word{n}" for n in range(400))
    text = context_text("User: yes!", [long], [long], 100)
    assert count_tokens(text) <= 100 and "\nUser: yes!\n" in text
    assert text.startswith("…word") and text.endswith("…")
    assert head_within("one two three four", 3) == "one two…"
    assert context_text("User: yes!", [], [], 512) == "User: yes!"

    def saved(name: str, scores: list[str], cells: dict[str, list[float]]) -> Any:
        return saved_run(name, scores, cells, embedding={})

    base = {"hybrid": [0.5, 0.5], "hybrid_spec_decay": [0.5, 0.5]}
    up_at_10 = {"hybrid_ctx_prev1": [0.5, 0.6], "hybrid_ctx_prev1_spec_decay": [0.5, 0.5]}
    locomo = saved("locomo", ["fraction"], {**base, **up_at_10})
    assert verdict([locomo], "ctx_prev1").startswith("holds on locomo")
    flat = saved(
        "longmemeval",
        ["all", "any"],
        {**base, "hybrid_ctx_prev1": [0.5, 0.5], "hybrid_ctx_prev1_spec_decay": [0.5, 0.5]},
    )
    assert verdict([locomo, flat], "ctx_prev1").startswith("worth pursuing")
    assert "above on no target" in verdict([flat], "ctx_prev1")
    down = {**up_at_10, "hybrid_ctx_prev1_spec_decay": [0.4, 0.6]}
    below = verdict([saved("locomo", ["fraction"], {**base, **down})], "ctx_prev1")
    assert (
        below
        == "not worth pursuing: below in locomo fraction hybrid_ctx_prev1_spec_decay@5 -0.1000"
    )


def test_stacked_pure_parts() -> None:
    """The stack's rule reads every score, k and decay against the product's rows or an
    idea's of the same decay, only a set's target cells count as above; the check against
    the earlier scripts' runs counts the questions whose scores differ, per row pair."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.stacked import STACK, same_scores, verdict

    def saved(name: str, scores: list[str], cells: dict[str, list[float]]) -> Any:
        return saved_run(name, scores, cells, kinds=[""], context={"rows": 1, "changed": 0})

    flat = [0.5, 0.5]
    product = {"hybrid": flat, "hybrid_spec_decay": flat}
    ideas = {f"{v}{s}": flat for v in ("ctx_prev2", "rrf3") for s in ("", "_spec_decay")}
    stack = {STACK: [0.6, 0.7], f"{STACK}_spec_decay": flat}
    locomo = saved("locomo", ["fraction"], {**product, **ideas, **stack})
    assert verdict([locomo], STACK) == "yes: above on locomo fraction@10 +0.2000"
    assert verdict([locomo], STACK, "rrf3") == "yes: above on locomo fraction@10 +0.2000"
    # LoCoMo's target is @10 with decay off: above with the spec's decay alone is no gain.
    late = {STACK: flat, f"{STACK}_spec_decay": [0.5, 0.7]}
    assert (
        verdict([saved("locomo", ["fraction"], {**product, **ideas, **late})], STACK)
        == "no: at or above everywhere, above on no target cell"
    )
    ahead = saved("locomo", ["fraction"], {**product, **ideas, **stack, "ctx_prev2": [0.7, 0.5]})
    assert verdict([ahead], STACK, "ctx_prev2") == "no: 1 cells below: locomo fraction@5 -0.1000"
    # LongMemEval's targets are recall_all @5: above at recall_any @10 alone is no gain.
    any_up = {STACK: flat, f"{STACK}_spec_decay": flat}
    lme = saved("longmemeval", ["all", "any"], {**product, **ideas, **any_up})
    lme["table"]["any"][STACK]["10"] = [0.9]
    assert verdict([lme], STACK) == "no: at or above everywhere, above on no target cell"
    lme["table"]["all"][f"{STACK}_spec_decay"]["5"] = [0.6]
    assert verdict([lme], STACK) == "yes: above on longmemeval all@5_spec_decay +0.1000"
    decayed = {**stack, f"{STACK}_spec_decay": [0.5, 0.4]}
    madial = saved("madial", ["fraction"], {**product, **ideas, **decayed})
    assert verdict([locomo, madial], STACK) == (
        "no: 1 cells below: madial fraction@10_spec_decay -0.1000"
    )

    was = {"hybrid": {"5": [0.5], "10": [0.5]}, "hybrid_ctx_prev2": {"5": [0.5], "10": [0.4]}}
    pairs = {"hybrid": "hybrid", "ctx_prev2": "hybrid_ctx_prev2", "rrf3": "rrf3"}  # rrf3: not run
    assert same_scores(locomo["table"], {"fraction": was}, pairs) == [
        "hybrid = hybrid: 0 questions differ",
        "ctx_prev2 = hybrid_ctx_prev2: 1 questions differ",
    ]


def test_batch_budget_sends_distinct_turns_the_same_for_a_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``batch_budget.py``'s turns: one session, numbered from 0, no two texts alike (a
    repeated text would be stored once and time nothing), the same for a seed."""
    here = Path(__file__).parent
    monkeypatch.syspath_prepend(str(here))
    import batch_budget  # the script's own module, beside big_file_put

    first = batch_budget.turns(40, seed=1)
    assert first == batch_budget.turns(40, seed=1)
    assert first != batch_budget.turns(40, seed=2)
    assert [t["turn_index"] for t in first] == list(range(40))
    assert {t["session_id"] for t in first} == {"bench-1"}
    texts = [str(t["user_message"]) + str(t["assistant_reply"]) for t in first]
    assert len(set(texts)) == len(texts)
    help_text = subprocess.run(
        [sys.executable, str(here / "batch_budget.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--turns" in help_text


VECTOR_STORAGE = [sys.executable, str(Path(__file__).with_name("vector_storage.py"))]


def test_vector_storage_script() -> None:
    """The storage comparison end to end on 300 rows: a figure line per storage, and
    pgvector's own storage (EXTERNAL) compresses nothing, by definition."""
    run = subprocess.run(
        [*VECTOR_STORAGE, "--chunks", "300", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["EXTERNAL", "EXTENDED", "MAIN"]
    assert lines[0].startswith("EXTERNAL: 0 of 300 values compressed, size median 10244 B")
    assert all("load query server time median" in line for line in lines)

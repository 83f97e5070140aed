"""MCP ``memory_search`` round trip over streamable HTTP next to REST search, same run.

    .venv/bin/python benchmarks/mcp_search.py --data-dir /tmp/mcp-bench [--turns 2000]
        [--rounds 300] [--top-k 5]

Starts a real ``memstrata serve`` (embedded PostgreSQL in ``--data-dir`` unless
``MEMSTRATA_DATABASE_URL`` is set; the local embedding server unless an API is
configured), indexes ``--turns`` synthetic conversation rounds for one user through REST,
then times, interleaved so both see the same machine load, ``--rounds`` searches each
through ``POST /api/memory/search`` and through the MCP tool ``memory_search`` (modern
per-request protocol, and a legacy initialize-handshake session). Each call embeds its
query, as a real search does (``--no-embeddings``: BM25 only, which leaves the
transports' own cost visible). Prints a Markdown table and a final JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import jwt
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memstrata.serve_process import free_port, start_serve, wait_ready

USER = "bench-user"
TOPICS = [
    ("sailing", "We took the dinghy out past the harbour wall"),
    ("cooking", "The risotto needed more stock and less cheese"),
    ("travel", "The night train to Vienna leaves at 21:40"),
    ("garden", "The tomatoes split after the heavy rain"),
    ("music", "Practised the second movement of the cello suite"),
    ("work", "The ledger migration is blocked on the audit sign-off"),
    ("health", "Physio said to keep the knee exercises going"),
    ("books", "Finished the chapter about the lighthouse keeper"),
]
QUERIES = [
    "when does the train to Vienna leave",
    "what happened to the tomatoes",
    "cello practice",
    "ledger migration status",
    "knee exercises",
    "harbour dinghy trip",
    "risotto recipe problems",
    "lighthouse keeper book",
]


def _start(data_dir: Path, secret: str, port: int, embeddings: bool) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        MEMSTRATA_DATA_DIR=str(data_dir),
        MEMSTRATA_JWT_SECRET=secret,
        MEMSTRATA_LOG_LEVEL="WARNING",
    )
    if not embeddings:
        env["MEMSTRATA_EMBEDDING_AUTOSTART"] = "false"
    log = (data_dir / "serve.log").open("wb")
    return start_serve(env, port, stdout=log, stderr=log)


async def _seed(http: httpx2.AsyncClient, url: str, turns: int) -> float:
    started = time.perf_counter()
    for i in range(turns):
        topic, line = TOPICS[i % len(TOPICS)]
        body = {
            "turn_index": i,
            "user_message": f"{line} (note {i} about {topic})",
            "assistant_reply": f"Noted: {topic} #{i}.",
        }
        response = await http.post(f"{url}/api/memory/conversations/bench/turns", json=body)
        response.raise_for_status()
    return time.perf_counter() - started


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(p95 * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    args.data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    now = int(time.time())
    token = jwt.encode({"sub": USER, "iat": now, "exp": now + 3600}, secret, "HS256")
    headers = {"Authorization": f"Bearer {token}"}
    process = _start(args.data_dir, secret, port, not args.no_embeddings)
    expected_mode = "bm25" if args.no_embeddings else "hybrid"
    try:
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            await asyncio.to_thread(wait_ready, process, url, timeout_s=60)
            seed_s = await _seed(http, url, args.turns)
            timings: dict[str, list[float]] = {"rest": [], "mcp": [], "mcp_legacy": []}
            async with (
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as modern,
                Client(
                    streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy"
                ) as legacy,
            ):
                for i in range(args.warmup + args.rounds):
                    # A distinct query per call: the server caches query embeddings, so a
                    # repeated query would skip the embedder for whichever transport came second.
                    base = QUERIES[i % len(QUERIES)]
                    a_rest = {"query": f"{base} (rest {i})", "top_k": args.top_k}
                    a_mcp = {"query": f"{base} (mcp {i})", "top_k": args.top_k}
                    a_legacy = {"query": f"{base} (legacy {i})", "top_k": args.top_k}
                    calls = {
                        "rest": lambda a=a_rest: http.post(f"{url}/api/memory/search", json=a),
                        "mcp": lambda a=a_mcp: modern.call_tool("memory_search", a),
                        "mcp_legacy": lambda a=a_legacy: legacy.call_tool("memory_search", a),
                    }
                    order = list(calls)
                    order = order[i % 3 :] + order[: i % 3]  # rotate: no fixed position
                    for name in order:
                        started = time.perf_counter()
                        result = await calls[name]()
                        elapsed = time.perf_counter() - started
                        if isinstance(result, httpx2.Response):
                            result.raise_for_status()
                            mode = result.json()["mode"]
                        else:
                            assert not result.is_error, result.content
                            mode = (result.structured_content or {})["mode"]
                        if mode != expected_mode:
                            raise SystemExit(f"{name} searched in {mode} mode, not {expected_mode}")
                        if i >= args.warmup:
                            timings[name].append(elapsed)
    finally:
        process.terminate()
        process.wait(timeout=30)
    summary = {name: _summary(samples) for name, samples in timings.items()}
    return {
        "mode": expected_mode,
        "turns": args.turns,
        "rounds": args.rounds,
        "top_k": args.top_k,
        "seed_seconds": round(seed_s, 1),
        **summary,
        "mcp_over_rest_p50": round(summary["mcp"]["p50_ms"] / summary["rest"]["p50_ms"], 2),
        "mcp_legacy_over_rest_p50": round(
            summary["mcp_legacy"]["p50_ms"] / summary["rest"]["p50_ms"], 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="state for memstrata serve")
    parser.add_argument("--turns", type=int, default=2000, help="conversation rounds indexed")
    parser.add_argument("--rounds", type=int, default=300, help="timed searches per transport")
    parser.add_argument("--warmup", type=int, default=20, help="untimed searches first")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument(
        "--no-embeddings",
        action="store_true",
        help="BM25 only (no query embedding): isolates the transports' own cost",
    )
    args = parser.parse_args()
    # A SIGTERM (e.g. from `timeout`) still stops the server through the finally block.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = asyncio.run(_bench(args))
    print("| transport | p50 ms | p95 ms | mean ms |")
    print("|---|---|---|---|")
    labels = {
        "rest": "REST `POST /api/memory/search`",
        "mcp": "MCP `memory_search` (streamable HTTP, per-request protocol)",
        "mcp_legacy": "MCP `memory_search` (streamable HTTP, initialize session)",
    }
    for name, label in labels.items():
        s = result[name]
        print(f"| {label} | {s['p50_ms']} | {s['p95_ms']} | {s['mean_ms']} |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

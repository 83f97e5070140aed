"""What the HTTP benchmarks share: ``memstrata serve`` in its own process on the
benchmark's database (``_server``), bearer tokens (``_token``), a timed search
(``_search``), batch-request bodies (``_batches``), LoCoMo texts and seeded users
(``locomo_texts``, ``seed_user``), waits on the server's background work
(``_wait_for_snapshots``, ``pending_vectors``) and p50/p95 (``_stats``).

Apart from ``http_latency`` (the ``memstrata bench http`` run) because the scripts in
benchmarks/ build their own measurements from the same pieces.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import numpy as np
from sqlalchemy import text as sql

from memstrata.bench.latency import _copy_rows, _unit
from memstrata.bench.locomo import load_conversations
from memstrata.config_secrets import REVEAL
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.runtime import Memstrata
from memstrata.serve_process import running_serve

USER = "http-bench"
SECRET = "http-bench-secret-0123456789-0123456789"


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 2), "p95_ms": round(p95, 2)}


def _token(user: str) -> dict[str, str]:
    now = int(time.time())
    token = jwt.encode({"sub": user, "iat": now, "exp": now + 7200}, SECRET, algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def _server(
    mem: Memstrata, data_dir: Path, extra_env: dict[str, str] | None = None
) -> Iterator[str]:
    """``memstrata serve`` in its own process on the benchmark's database and embeddings."""
    assert isinstance(mem.embedder, OpenAICompatibleEmbedder)
    spec = mem.embedder.spec
    env = {
        **os.environ,
        "MEMSTRATA_DATABASE_URL": mem.db.engine.url.render_as_string(hide_password=False),
        "MEMSTRATA_EMBEDDING_MODELS": f"[{spec.model_dump_json(context={REVEAL: True})}]",
        "MEMSTRATA_EMBEDDING_MODEL": spec.name,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_JWT_SECRET": SECRET,
        "MEMSTRATA_DATA_DIR": str(data_dir),
        "MEMSTRATA_LOG_LEVEL": "WARNING",
        "MEMSTRATA_MAX_REQUEST_BYTES": str(8 * 1024 * 1024),
        # A shared, busy machine: measure slow query embeddings rather than time them out.
        "MEMSTRATA_EMBEDDING_TIMEOUT_S": "120",
        # The benchmarks copy their rows in directly and time what a server does with
        # them: a start-up pass writing every missing index snapshot would race the timed
        # phases (a "first-ever" load could find its snapshot already written) and, in
        # PostgreSQL at normal priority, take the CPU from the lower-priority passage
        # server, so an import's budget ran out (docs/BENCHMARKS.md, "HTTP latency").
        "MEMSTRATA_INDEX_SNAPSHOT_BACKFILL": "false",
        **(extra_env or {}),
    }
    with running_serve(env, stderr=subprocess.DEVNULL) as base:
        yield base


def locomo_texts(path: Path, copies: int) -> tuple[list[str], list[str]]:
    """LoCoMo's turn texts, and its distinct questions ``copies`` times over, each copy
    marked — every text is asked once, so the query-embedding cache never answers."""
    conversations = load_conversations(path)
    turns = [r.user_message for c in conversations for r in c.rounds]
    questions = list(dict.fromkeys(q for c in conversations for q, _, _ in c.questions))
    return turns, [f"{q} ({n})" if copies > 1 else q for n in range(copies) for q in questions]


def seed_user(
    mem: Memstrata, user: str, turns: list[str], rows: int, rng: np.random.Generator
) -> None:
    """``rows`` LoCoMo turn texts (cycled, each marked so no two are equal) with random
    384-d unit vectors under the embedding model's name, bulk-copied for ``user``: what a
    latency measurement needs is the sizes, not the meaning."""
    assert mem.embedder is not None
    texts = [f"{turns[i % len(turns)]} (#{i})" for i in range(rows)]
    start = datetime(2025, 1, 1, tzinfo=UTC)
    _copy_rows(mem, [user] * rows, texts, _unit(rng, rows, 384), start, mem.embedder.name)


def _search(
    client: httpx.Client, base: str, query: str, user: str = USER
) -> tuple[float, dict[str, Any]]:
    headers = _token(user)
    started = time.perf_counter()
    response = client.post(
        f"{base}/api/memory/search", json={"query": query, "top_k": 10}, headers=headers
    )
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"search failed: {response.status_code} {response.text[:200]}")
    body: dict[str, Any] = response.json()
    if body["mode"] != "hybrid":
        raise RuntimeError(f"search ran without vectors: {body['warnings']}")
    return elapsed, body


def _batches(turns: list[str], size: int, start: datetime) -> list[dict[str, Any]]:
    """``turns`` as batch-request bodies of at most ``size`` turns, in sessions of 20."""
    return [
        {
            "turns": [
                {
                    "session_id": f"s{(offset + i) // 20}",
                    "turn_index": (offset + i) % 20,
                    "user_message": text,
                    "timestamp": (start + timedelta(minutes=offset + i)).isoformat(),
                }
                for i, text in enumerate(turns[offset : offset + size])
            ]
        }
        for offset in range(0, len(turns), size)
    ]


def _wait_for_snapshots(
    mem: Memstrata, users: list[str], timeout_s: float = 300.0, rows: int = 0
) -> None:
    """Until every user has an index snapshot (holding more than ``rows`` rows); fails
    rather than time cold loads without."""
    deadline = time.monotonic() + timeout_s
    while True:
        with mem.db.engine.connect() as conn:
            have = set(
                conn.execute(
                    sql(
                        "SELECT user_id FROM memory_index_snapshots "
                        "WHERE user_id = ANY(:users) AND row_count > :rows"
                    ),
                    {"users": users, "rows": rows},
                ).scalars()
            )
        if have >= set(users):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no index snapshot was written for {sorted(set(users) - have)}")
        time.sleep(0.2)


def pending_vectors(client: httpx.Client, base: str) -> int | None:
    """Rows waiting for a vector (all users), from ``/metrics`` — not ``/readyz``, which
    opens a new database connection per call (a new server process) and, polled 20 times
    a second, would itself load the machine it measures. None when the scrape could not
    count them (the sample is left out then, never stale): the caller polls again."""
    for line in client.get(f"{base}/metrics").text.splitlines():
        if line.startswith("memstrata_embeddings_pending "):
            return int(float(line.split()[1]))
    return None

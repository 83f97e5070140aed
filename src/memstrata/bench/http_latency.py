"""End-to-end search latency over real HTTP (``memstrata bench http``).

What a platform sees: ``memstrata serve`` runs as its own process on loopback, against the
benchmark's PostgreSQL and the local embedding server; the client sends LoCoMo questions
to ``POST /api/memory/search`` with a bearer token, each question once (so the query
embedding cache never hides the embedding cost), and times the whole round trip.

- the measured user has ``chunks`` rows: LoCoMo turn texts, cycled, with random 384-d unit
  vectors stored under the real model's name (embedding 10k passages would take an hour
  here; latency depends on sizes, not on meaning) — real query embeddings are compared
  with them;
- idle: p50/p95 over ``queries`` questions;
- loaded: the same while another user ingests LoCoMo turns through
  ``POST /api/memory/conversations/turns:batch`` (real embeddings) in a loop;
- cold: the first search for a user in a running (warmed-up) server — the user's index is
  loaded on first use — over ``restarts`` users of ``chunks`` rows each: first from their
  rows (bulk-copied, so no index snapshot exists yet; each load's snapshot is written once
  loads have been quiet for a second), then, once their snapshots are written, in four restarted
  servers alternating snapshots on (the load reads the snapshot: what a restart, an
  eviction or another replica sees) and off (the load reads every row);
- after an import: ``restarts`` more users get ``chunks − IMPORT_TURNS`` bulk-copied rows
  and then their last ``IMPORT_TURNS`` through the batch endpoint (real embeddings) — the
  last batch of an import. The index warmer (``retrieval.warmer``) loads each user's index
  and writes its snapshot in the background; timed: the first search sent right after the
  batch's response, and, for another ``restarts`` users, the first search once the
  snapshot is written (and how long after the response that was);
- ingestion: turns/s of the single-turn endpoint vs the batch endpoint, same turns, same
  run.

The pieces it shares with the scripts in benchmarks/ (the server, tokens, a timed search,
seeding, waits) are in ``http_common``.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from memstrata.bench.http_common import (
    USER,
    _batches,
    _search,
    _server,
    _stats,
    _token,
    _wait_for_snapshots,
    locomo_texts,
    pending_vectors,
)
from memstrata.bench.latency import _copy_rows, _unit
from memstrata.config import INDEX_SNAPSHOT_MIN_ROWS
from memstrata.retrieval.rounds import MAX_BATCH_TURNS
from memstrata.runtime import Memstrata

INGEST_TURNS = 100  # turns sent through each ingestion endpoint (one batch request)
IMPORT_TURNS = 100  # the last batch of an import, sent through the batch endpoint


def run_http(
    mem: Memstrata,
    locomo_path: Path,
    *,
    chunks: int = 10_000,
    queries: int = 200,
    restarts: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    assert mem.embedder is not None
    turns, questions = locomo_texts(locomo_path, 1)
    if len(questions) < 2 * queries + 20:
        raise ValueError(
            f"need {2 * queries + 20} distinct questions, the file has {len(questions)}"
        )
    rng = np.random.default_rng(11)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    texts = [f"{turns[i % len(turns)]} (#{i})" for i in range(chunks)]
    users = [USER] + [f"{USER}-cold-{n}" for n in range(restarts)] + [f"{USER}-warm-up"]
    importers = [f"{USER}-import-{how}-{n}" for how in ("now", "later") for n in range(restarts)]
    imported = max(chunks - IMPORT_TURNS, 0)
    for user in users + importers:
        size = 50 if user.endswith("warm-up") else imported if user in importers else chunks
        vectors = _unit(rng, size, 384)
        _copy_rows(mem, [user] * size, texts[:size], vectors, start, mem.embedder.name)
    say(f"stored {chunks} rows for each of {len(users) - 1} users")
    result: dict[str, Any] = {"chunks": chunks, "queries": queries}
    snapshots = chunks >= INDEX_SNAPSHOT_MIN_ROWS  # the server's default threshold
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-http-") as tmp,
        _server(mem, Path(tmp)) as base,
        httpx.Client(timeout=600) as client,
    ):
        _search(client, base, questions[-1], users[-1])  # the server's own first request
        cold_questions = [questions[-(n + 2)] for n in range(restarts)]
        total, part = _first_searches(client, base, users[1:-1], cold_questions)
        result["cold_first_search_ms"], result["cold_search_part_ms"] = total, part
        say(f"cold first search: {result['cold_first_search_ms']} ms")
        _search(client, base, questions[-1])  # load the measured user's index
        # Their snapshots are written in the background: let that finish before timing.
        if snapshots:
            _wait_for_snapshots(mem, users[:-1])
            last = _batches(
                texts[imported:chunks], IMPORT_TURNS, start + timedelta(minutes=imported)
            )
            import_questions = questions[-(4 * restarts + 2) : -(2 * restarts + 2)]
            result.update(
                _after_import(mem, client, base, importers, last[0], import_questions, chunks)
            )
            say(
                f"first search after an import: {result['after_import_now_ms']} ms at once, "
                f"{result['after_import_warm_ms']} ms once warm"
            )
        for q in questions[-20:]:
            _search(client, base, q)  # warm-up
        result.update(_timed_searches(client, base, questions[:queries], "idle"))
        say(f"idle: {result['idle']}")
        repeat = [_search(client, base, q)[0] for q in questions[: min(50, queries)]]
        result["repeated_query_cached"] = _stats(repeat)

        result["ingest"] = ingest_rates(client, base, turns)
        say(f"ingest: {result['ingest']}")

        with _IngestLoop(base, turns, start) as ingest:
            t0 = time.perf_counter()
            result.update(_timed_searches(client, base, questions[queries : 2 * queries], "loaded"))
            seconds = time.perf_counter() - t0
        result["loaded_other_user_turns_per_s"] = round(ingest.turns / seconds, 1)
        result["loaded_p95_over_idle_p95"] = round(
            result["loaded"]["p95_ms"] / result["idle"]["p95_ms"], 2
        )
        say(f"loaded: {result['loaded']}")
    if snapshots:
        unseen = questions[-(2 * restarts + 2) : -(restarts + 2)]  # not asked in server 1
        # Restarted servers, alternating: snapshots on, off, on, off (same users, same rows).
        for round_ in range(2):
            for on in (True, False):
                key = "cold_from_snapshot" if on else "cold_from_rows_after_restart"
                total, part = _cold_after_restart(mem, users, [questions[-1], *unseen], on)
                result.setdefault(f"{key}_ms", []).extend(total)
                result.setdefault(f"{key}_search_part_ms", []).extend(part)
                say(f"{key} (round {round_ + 1}): {total} ms")
    return result


def _timed_searches(
    client: httpx.Client, base: str, questions: list[str], name: str
) -> dict[str, Any]:
    """Each question searched once: ``name`` (the whole request), ``name_embed`` and
    ``name_search`` (the server's own timings of the query embedding and the search)."""
    total: list[float] = []
    embed: list[float] = []
    search: list[float] = []
    for q in questions:
        elapsed, body = _search(client, base, q)
        total.append(elapsed)
        embed.append(body["timings_ms"]["embed"])
        search.append(body["timings_ms"]["search"])
    return {name: _stats(total), f"{name}_embed": _stats(embed), f"{name}_search": _stats(search)}


class _IngestLoop:
    """Another user batch-ingesting ``turns`` over and over (bounded) while the block runs;
    ``turns`` counts what it stored."""

    def __init__(self, base: str, turns: list[str], start: datetime) -> None:
        self.base, self.rounds, self.start = base, turns, start
        self.turns = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _IngestLoop:
        self._thread.start()
        time.sleep(2.0)  # let the first batch reach the embedding server
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=600)

    def _run(self) -> None:
        with httpx.Client(timeout=600) as other:
            for n in range(10_000):  # bounded
                for batch in _batches(self.rounds, 100, self.start):
                    if self._stop.is_set():
                        return
                    r = other.post(
                        f"{self.base}/api/memory/conversations/turns:batch",
                        json=batch,
                        headers=_token(f"ingest-{n}"),
                    )
                    if r.status_code != 200:
                        raise RuntimeError(f"batch failed: {r.status_code} {r.text[:200]}")
                    self.turns += len(batch["turns"])


def _after_import(
    mem: Memstrata,
    client: httpx.Client,
    base: str,
    importers: list[str],
    batch: dict[str, Any],
    questions: list[str],
    rows: int,
) -> dict[str, list[float]]:
    """Each importer's last batch through the endpoint, then its first search (one unseen
    question each): at once for the first half of the users, for the others once a
    snapshot of all their ``rows`` rows is written."""
    restarts = len(importers) // 2
    out: dict[str, list[float]] = {}
    for n, user in enumerate(importers):
        r = client.post(
            f"{base}/api/memory/conversations/turns:batch", json=batch, headers=_token(user)
        )
        if r.status_code != 200:
            raise RuntimeError(f"import batch failed: {r.status_code} {r.text[:200]}")
        if r.json()["embedded"] != len(batch["turns"]):
            # Its first search would then rank rows without their vectors: no figure.
            raise RuntimeError(
                f"the import batch embedded {r.json()['embedded']} of {len(batch['turns'])} "
                f"turns within its budget ({r.json()['deferred']} left to the worker): the "
                "host is too busy for this phase (check `uptime`); no figure"
            )
        answered = time.monotonic()
        if n >= restarts:
            _wait_for_snapshots(mem, [user], rows=rows - 1)
            out.setdefault("after_import_ready_s", []).append(round(time.monotonic() - answered, 2))
        elapsed, body = _search(client, base, questions[n], user)
        key = "after_import_now" if n < restarts else "after_import_warm"
        out.setdefault(f"{key}_ms", []).append(round(elapsed, 1))
        out.setdefault(f"{key}_search_part_ms", []).append(round(body["timings_ms"]["search"], 1))
    # The "at once" users' snapshots too, so no background write runs into what follows.
    _wait_for_snapshots(mem, importers, rows=rows - 1)
    return out


def _cold_after_restart(
    mem: Memstrata, users: list[str], questions: list[str], snapshots: bool
) -> tuple[list[float], list[float]]:
    """A new server (a restart): the first search of each cold user, reading its snapshot
    (``snapshots``) or, with snapshots switched off, all its rows. Totals and search parts."""
    extra = {} if snapshots else {"MEMSTRATA_INDEX_SNAPSHOT_MIN_ROWS": "0"}
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-http-") as tmp,
        _server(mem, Path(tmp), extra) as base,
        httpx.Client(timeout=600) as client,
    ):
        _search(client, base, questions[0], users[-1])  # the server's own first request
        return _first_searches(client, base, users[1:-1], questions[1:])


def _first_searches(
    client: httpx.Client, base: str, users: list[str], questions: list[str]
) -> tuple[list[float], list[float]]:
    """One search per user, each its first in the server: round trips and search parts, ms."""
    total, part = [], []
    for question, user in zip(questions, users, strict=True):
        elapsed, body = _search(client, base, question, user)
        total.append(round(elapsed, 1))
        part.append(round(body["timings_ms"]["search"], 1))
    return total, part


def ingest_rates(
    client: httpx.Client, base: str, turns: list[str], n: int = INGEST_TURNS
) -> dict[str, float]:
    """Turns/s of the single-turn endpoint and of the batch endpoint for the same ``n``
    turns — same texts, sessions and timestamps, each endpoint for a user of its own — so
    both embed the same passages (per-turn cost grows with a turn's length: LoCoMo's first
    20 turns are ~35 tokens, its first 200 ~50). With an embedding API, the batch's rate
    is also timed until its last vector (``batch_all_vectors_*``): where the write's budget
    ran out first, the answer came with turns left to the worker (``batch_deferred``)."""
    if not turns or not 1 <= n <= MAX_BATCH_TURNS:
        raise ValueError(f"need at least one turn and 1 <= n <= {MAX_BATCH_TURNS}")
    (batch,) = _batches(turns[:n], n, datetime(2025, 6, 1, tzinfo=UTC))
    t0 = time.perf_counter()
    for turn in batch["turns"]:
        r = client.post(
            f"{base}/api/memory/conversations/{turn['session_id']}/turns",
            json={k: v for k, v in turn.items() if k != "session_id"},
            headers=_token("ingest-single"),
        )
        if r.status_code != 200:
            raise RuntimeError(f"turn failed: {r.status_code} {r.text[:200]}")
    single = len(batch["turns"]) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    r = client.post(
        f"{base}/api/memory/conversations/turns:batch", json=batch, headers=_token("ingest-batch")
    )
    if r.status_code != 200:
        raise RuntimeError(f"batch failed: {r.status_code} {r.text[:200]}")
    batched = len(batch["turns"]) / (time.perf_counter() - t0)
    rates: dict[str, float] = {
        "turns": len(batch["turns"]),
        "single_turns_per_s": round(single, 2),
        "batch_turns_per_s": round(batched, 2),
        "batch_over_single": round(batched / single, 2),
    }
    answer = r.json()
    if answer["embedding_failed"]:  # timed out on a busy host: not a rate of storing vectors
        raise RuntimeError(f"the batch's embeddings failed: {r.text[:200]}")
    if answer["embedded"] + answer["deferred"] == 0:  # no embedding API: nothing to defer
        return rates
    # The write's budget (MEMSTRATA_EMBEDDING_FILE_BUDGET_S) may have left turns to the
    # worker: the batch's rate until its last vector too, and the background import below
    # starts with none of them still pending (its own figure would include them).
    batch_vectors = len(batch["turns"]) / _no_pending_after(client, base, t0)
    rates["batch_deferred"] = answer["deferred"]
    rates["batch_all_vectors_turns_per_s"] = round(batch_vectors, 2)
    rates["batch_all_vectors_over_single"] = round(batch_vectors / single, 2)
    answered_s, vectors_s = _background_import(client, base, batch)
    return {
        **rates,
        "background_turns_per_s": round(len(batch["turns"]) / answered_s, 2),
        "background_over_single": round(len(batch["turns"]) / answered_s / single, 2),
        "background_all_vectors_turns_per_s": round(len(batch["turns"]) / vectors_s, 2),
    }


def _background_import(
    client: httpx.Client, base: str, batch: dict[str, Any]
) -> tuple[float, float]:
    """The same batch with ``embed: background`` for another user: seconds until the
    response, and until the worker has embedded every row (none pending).
    Fails when rows were not deferred or a vector never comes."""
    t0 = time.perf_counter()
    r = client.post(
        f"{base}/api/memory/conversations/turns:batch",
        json={**batch, "embed": "background"},
        headers=_token("ingest-background"),
    )
    answered = time.perf_counter() - t0
    if r.status_code != 200 or r.json()["deferred"] != r.json()["inserted"]:
        raise RuntimeError(f"background batch failed: {r.status_code} {r.text[:200]}")
    return answered, _no_pending_after(client, base, t0)


def _no_pending_after(client: httpx.Client, base: str, t0: float) -> float:
    """Seconds from ``t0`` (``time.perf_counter()``) until the server reports no row
    waiting for a vector; fails when some still wait after 600 s."""
    deadline = t0 + 600
    while time.perf_counter() < deadline:
        if pending_vectors(client, base) == 0:
            return time.perf_counter() - t0
        time.sleep(0.1)
    raise RuntimeError("the deferred rows were not embedded within 600 s; no figure")

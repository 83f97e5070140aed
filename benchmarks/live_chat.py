"""A live conversation over HTTP: each round stores a turn, then searches — 10k-row user.

    .venv/bin/python benchmarks/live_chat.py PATH/TO/locomo-dev.json --rounds 60

Real ``memstrata serve`` and the local embedding servers. The user holds 10k rows
(LoCoMo turn texts under the real model's name, bulk-copied, index loaded and its
snapshot written). Interleaved
per round: a search with nothing new (the baseline of the same run), then a turn stored
through ``POST /api/memory/conversations/{session_id}/turns`` (embedded inline, as the
spec asks), then a search — the one an agent makes before it answers the next message.
Every search asks a question not asked before (no query-embedding cache hit). Prints one
JSON line: round trip and the server's own search part (without the query embedding) for
both kinds of search, medians and p95, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from memstrata.bench.http_common import (
    _search,
    _server,
    _stats,
    _token,
    _wait_for_snapshots,
    locomo_texts,
    seed_user,
)
from memstrata.cli.bench import bench_runtime

ROWS = 10_000
USER = "live-chat"


def _turn(client: httpx.Client, base: str, n: int, text: str) -> None:
    r = client.post(
        f"{base}/api/memory/conversations/live/turns",
        json={"turn_index": n, "user_message": text, "assistant_reply": "Noted."},
        headers=_token(USER),
    )
    if r.status_code != 200 or r.json()["embedded"] < 1 or r.json()["embedding_failed"]:
        raise RuntimeError(
            f"turn {n} was not stored with its vector: {r.status_code} {r.text[:200]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    turns, questions = locomo_texts(args.locomo, 3)
    if len(questions) < 2 * args.rounds + 1:
        raise SystemExit(f"need {2 * args.rounds + 1} questions, the file has {len(questions)}")
    rng = np.random.default_rng(5)
    rtt: dict[str, list[float]] = {"unchanged": [], "after_turn": []}
    part: dict[str, list[float]] = {"unchanged": [], "after_turn": []}
    with bench_runtime(None) as mem:
        assert mem.embedder is not None
        seed_user(mem, USER, turns, ROWS, rng)
        with (
            tempfile.TemporaryDirectory(prefix="memstrata-live-") as tmp,
            _server(mem, Path(tmp)) as base,
            httpx.Client(timeout=600) as client,
        ):
            ask = iter(questions)
            _search(client, base, next(ask), USER)  # the cold load, not timed
            _wait_for_snapshots(mem, [USER])  # the load's snapshot write, not timed either

            def timed(kind: str) -> None:
                ms, body = _search(client, base, next(ask), USER)
                rtt[kind].append(ms)
                part[kind].append(float(body["timings_ms"]["search"]))

            for n in range(args.rounds):
                timed("unchanged")
                _turn(client, base, n, turns[(ROWS + n) % len(turns)])
                timed("after_turn")
    result: dict[str, Any] = {"rows": ROWS, "rounds": args.rounds}
    for kind in rtt:
        result[kind] = {**_stats(rtt[kind]), "search_part": _stats(part[kind])}
    result["after_turn_over_unchanged"] = round(
        statistics.median(rtt["after_turn"]) / statistics.median(rtt["unchanged"]), 2
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

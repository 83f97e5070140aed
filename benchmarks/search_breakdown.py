"""Where an idle HTTP search spends its time, 10k-row user.

    .venv/bin/python benchmarks/search_breakdown.py PATH/TO/locomo-dev.json --queries 800

Real ``memstrata serve`` and the local embedding servers, as ``memstrata bench http``: the
user holds 10k rows (LoCoMo turn texts with random vectors under the real model's name,
bulk-copied; index loaded, its snapshot written before timing). Each question is asked
once (no query-embedding cache hit). Per search it splits the round trip into: the
client's side and the network (round trip − the server's ``Server-Timing``), the query
embedding and the search itself (the response's ``timings_ms``), and the rest of the
server's time (routing, authentication, validation, serialisation). Prints one JSON
line: medians and p95 of each part. Stops without figures if a search ran without
vectors.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

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
USER = "breakdown"
WARM_UP = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--queries", type=int, default=800)
    args = parser.parse_args()
    turns, questions = locomo_texts(args.locomo, 1)
    if len(questions) < args.queries + WARM_UP:
        raise SystemExit(f"need {args.queries + WARM_UP} distinct questions; no figures")
    parts: dict[str, list[float]] = {
        k: [] for k in ("round_trip", "client_and_network", "embed", "search", "server_rest")
    }
    with bench_runtime(None) as mem:
        assert mem.embedder is not None
        seed_user(mem, USER, turns, ROWS, np.random.default_rng(11))
        with (
            tempfile.TemporaryDirectory(prefix="memstrata-breakdown-") as tmp,
            _server(mem, Path(tmp)) as base,
            httpx.Client(timeout=600) as client,
        ):
            for q in questions[-WARM_UP:]:
                _search(client, base, q, USER)
            _wait_for_snapshots(mem, [USER])
            for q in questions[: args.queries]:
                headers = _token(USER)
                began = time.perf_counter()
                r = client.post(
                    f"{base}/api/memory/search", json={"query": q, "top_k": 10}, headers=headers
                )
                total = (time.perf_counter() - began) * 1000
                body = r.json()
                if r.status_code != 200 or body["mode"] != "hybrid":
                    raise SystemExit(f"search without vectors or failed: {r.text[:200]}")
                app = float(r.headers["server-timing"].split("dur=")[1])
                embed, search = body["timings_ms"]["embed"], body["timings_ms"]["search"]
                parts["round_trip"].append(total)
                parts["client_and_network"].append(total - app)
                parts["embed"].append(embed)
                parts["search"].append(search)
                parts["server_rest"].append(app - embed - search)
    print(
        json.dumps(
            {"rows": ROWS, "queries": args.queries, **{k: _stats(v) for k, v in parts.items()}}
        )
    )


if __name__ == "__main__":
    main()

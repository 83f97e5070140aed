"""New rows' vectors as text (the write path before) against one binary ``vector[]``
(``EmbeddingWrites``, retrieval.vector_binary):
``python benchmarks/insert_path.py --rows 500 --runs 15``.

On an embedded PostgreSQL in a temporary directory (or ``MEMSTRATA_DATABASE_URL``), the
paths are interleaved in a shuffled order in every run, after a warm-up run:

- ``repository``: one transaction writing ``--rows`` new rows with new vectors of 384 and
  1024 dimensions, as ``StagedIndex.apply`` does (lock, read the paths, insert, bump):
  the ORM insert and the JSON statement with vectors as text (``insert`` and
  ``insert_copies`` before, kept in tests/retrieval/text_insert_paths.py) against
  ``insert`` now;
- end to end, with the old ``insert`` in place of the new one for the "before" column
  and no model running: ``Indexer.index_rounds(embed=False)`` of ``--rows`` rounds (an
  ``embed: background`` import: rows without vectors), then the healing worker's
  write-back of a 384-d vector for each of those rows (``replace_vectors``: read,
  delete, insert), each timed on its own.

Per path: wall time, the client's CPU (``process_time``) and the CPU of every process of
the PostgreSQL cluster (from ``/proc``, so only for a server on this machine; 10 ms
ticks), medians and p95; and a check that every path stored the same vectors (md5 of
``embedding::text``)."""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import event, text
from tests.retrieval import text_insert_paths as text_paths

from benchmarks.scratch import scratch_runtime
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.repository_writes import EmbeddingWrites
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.vector_binary import VectorArray


def old_insert(repo: EmbeddingWrites, chunks: Sequence[NewChunk]) -> None:
    """``insert`` before: ORM batches, each vector as pgvector's text."""
    text_paths.old_insert(repo.session, repo.user_id, chunks)


def old_insert_copies(repo: EmbeddingWrites, rows: Sequence[tuple[int | None, NewChunk]]) -> None:
    """``insert_copies`` before: each vector as text inside the JSON array."""
    text_paths.old_insert_copies(repo.session, repo.user_id, rows)


NEW_INSERT = EmbeddingWrites.insert
Writer = Callable[[EmbeddingWrites, Sequence[NewChunk]], None]
REPOSITORY: dict[str, Writer] = {
    "text: ORM insert": old_insert,
    "text: JSON insert_copies": lambda r, c: old_insert_copies(r, [(None, x) for x in c]),
    "binary: insert": NEW_INSERT,
}
END_TO_END: dict[str, Writer] = {"text (before)": old_insert, "binary (now)": NEW_INSERT}
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "memory",
    "agent",
    "user",
    "said",
    "tea",
    "deploy",
    "retry",
    "oolong",
]


def cluster_cpu(pgdata: Path | None) -> float:
    """CPU seconds of the postmaster's children so far (backends, WAL writer …)."""
    if pgdata is None:
        return float("nan")
    master = (pgdata / "postmaster.pid").read_text().split()[0]
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == master:  # ppid
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def chunks_for(run: int, rows: int, dim: int) -> list[NewChunk]:
    rng = random.Random(run * 7919 + dim)
    out = []
    for i in range(rows):
        said = f"run {run} turn {i}: " + " ".join(rng.choice(WORDS) for _ in range(40))
        out.append(
            NewChunk(
                file_path=f"sessions/s{run}/{i}",
                chunk_index=0,
                chunk_text=said,
                content_hash=hashlib.sha256(said.encode()).hexdigest(),
                created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i),
                embedding=[rng.uniform(-1, 1) for _ in range(dim)],
                embedding_model="bench-model",
                source_ids=[f"t{run}-{i}"],
            )
        )
    return out


def rounds_for(run: int, rows: int) -> list[Round]:
    rng = random.Random(run)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Round(f"s{run}-{i // 20}", i % 20, " ".join(rng.choice(WORDS) for _ in range(25)),
              " ".join(rng.choice(WORDS) for _ in range(25)), at + timedelta(minutes=i))
        for i in range(rows)
    ]  # fmt: skip


def reset(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(text("TRUNCATE memory_embeddings, memory_index_state, memory_index_snapshots"))


def vectors_md5(db: Database) -> str:
    with db.engine.connect() as conn:
        return str(
            conn.execute(
                text(
                    "SELECT md5(string_agg(file_path || chunk_index || embedding::text || "
                    "embedding_dim, ',' ORDER BY file_path, chunk_index)) FROM memory_embeddings"
                )
            ).scalar_one()
        )


def timed(pgdata: Path | None, work: Callable[[], None]) -> tuple[float, float, float]:
    c0, s0, w0 = time.process_time(), cluster_cpu(pgdata), time.perf_counter()
    work()
    w1, c1, s1 = time.perf_counter(), time.process_time(), cluster_cpu(pgdata)
    return (w1 - w0) * 1000, (c1 - c0) * 1000, (s1 - s0) * 1000


def repository_write(db: Database, write: Writer, chunks: list[NewChunk]) -> Callable[[], None]:
    def work() -> None:
        with transaction(db.sessions) as session:
            repo = EmbeddingRepository(session, "bench")
            repo.lock()
            repo.chunks_for_paths(sorted({c.file_path for c in chunks}))
            write(repo, chunks)
            repo.bump_generation()

    return work


def import_rounds(db: Database, rounds: list[Round]) -> Callable[[], None]:
    def work() -> None:
        Indexer(db.sessions).index_rounds("bench", rounds, embed=False)

    return work


def heal(db: Database, vectors: list[list[float]]) -> Callable[[], None]:
    """The worker's write-back (``healing._write_back``) of a vector for every row."""

    def work() -> None:
        with transaction(db.sessions) as session:
            repo = EmbeddingRepository(session, "bench")
            repo.lock()
            ids = sorted(repo.live_ids())
            repo.replace_vectors(dict(zip(ids, vectors, strict=True)), "m")

    return work


def sent_bytes(value: Any) -> int:
    """Roughly what a statement's parameters put on the wire: texts and binary values."""
    if isinstance(value, dict):
        return sum(sent_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(sent_bytes(v) for v in value)
    if isinstance(value, VectorArray):
        return len(value.data)
    return len(value.encode()) if isinstance(value, str) else 8


def payload(db: Database, write: Writer, chunks: list[NewChunk]) -> int:
    """Bytes of parameters of the write's INSERT statements."""
    seen: list[int] = []

    def note(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.startswith("INSERT INTO memory_embeddings"):
            seen.append(sent_bytes(params))

    reset(db)
    event.listen(db.engine, "before_cursor_execute", note)
    try:
        repository_write(db, write, chunks)()
    finally:
        event.remove(db.engine, "before_cursor_execute", note)
    return sum(seen)


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def report(title: str, results: dict[str, list[tuple[float, float, float]]]) -> None:
    print(f"\n{title}")
    print("| path | wall median | wall p95 | client CPU median | p95 | server CPU median | p95 |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        cols = []
        for k in range(3):
            xs = [r[k] for r in runs]
            cols += [f"{statistics.median(xs):.1f}", f"{p95(xs):.1f}"]
        print(f"| {name} | " + " | ".join(cols) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 1024])
    args = parser.parse_args()
    with scratch_runtime("insert-path-") as mem:
        db = mem.db
        embedded = getattr(db.embedded, "pgdata", None)
        pgdata = Path(embedded) if embedded is not None else None
        for dim in args.dims:
            results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in REPOSITORY}
            for run in range(args.runs + 1):  # run 0 warms up
                digests = set()
                for name in random.Random(run).sample(list(REPOSITORY), len(REPOSITORY)):
                    reset(db)
                    work = repository_write(db, REPOSITORY[name], chunks_for(run, args.rows, dim))
                    took = timed(pgdata, work)
                    digests.add(vectors_md5(db))
                    if run:
                        results[name].append(took)
                if len(digests) != 1:
                    raise SystemExit(f"the paths stored different vectors (run {run}, {dim}-d)")
            report(f"repository: {args.rows} new rows, {dim}-d vectors, ms", results)
            for name, write in REPOSITORY.items():
                sent = payload(db, write, chunks_for(0, args.rows, dim))
                print(f"{name}: {sent / args.rows / 1024:.1f} KiB of parameters per row")
        imports: dict[str, list[tuple[float, float, float]]] = {k: [] for k in END_TO_END}
        heals: dict[str, list[tuple[float, float, float]]] = {k: [] for k in END_TO_END}
        for run in range(args.runs + 1):
            digests = set()
            rng = random.Random(run)
            vectors = [[rng.uniform(-1, 1) for _ in range(384)] for _ in range(args.rows)]
            for name in random.Random(run).sample(list(END_TO_END), len(END_TO_END)):
                reset(db)
                EmbeddingWrites.insert = END_TO_END[name]  # type: ignore[method-assign, assignment]
                try:
                    imported = timed(pgdata, import_rounds(db, rounds_for(run, args.rows)))
                    healed = timed(pgdata, heal(db, vectors))
                finally:
                    EmbeddingWrites.insert = NEW_INSERT  # type: ignore[method-assign]
                digests.add(vectors_md5(db))
                if run:
                    imports[name].append(imported)
                    heals[name].append(healed)
            if len(digests) != 1:
                raise SystemExit(f"the paths stored different vectors (end to end, run {run})")
        report(f"Indexer.index_rounds(embed=False): {args.rows} rounds, no vectors, ms", imports)
        report(f"replace_vectors: 384-d vectors for those {args.rows} rows, ms", heals)
        print("\nevery path stored the same vectors in every run (md5 of embedding::text)")


if __name__ == "__main__":
    main()

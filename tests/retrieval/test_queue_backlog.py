"""The healing backlog on the real PostgreSQL: what counts as pending, the count's limit,
and that the queue's cross-user statements read indexes, not the whole table (a probe
at two million rows took about a second when they did)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.exc import OperationalError

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import queue

MODEL = "model-b"
VECTOR = "[" + ",".join(["0.5"] * 2560) + "]"


def add_row(db: Database, n: int, vector: bool, model: str | None, **extra: object) -> None:
    columns = {"embedding_error": None, "inserted_at": "2026-01-01T00:00:00Z", **extra}
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, "
                "embedding, embedding_model, embedding_error, inserted_at) VALUES "
                "(:u, :p, 0, 'text', CAST(:v AS vector), :m, :e, CAST(:t AS timestamptz))"
            ),
            {
                "u": f"user-{n % 3}",
                "p": f"row-{n}",
                "v": VECTOR if vector else None,
                "m": model,
                "e": columns["embedding_error"],
                "t": columns["inserted_at"],
            },
        )


def test_pending_is_every_row_without_a_vector_of_the_current_model(db: Database) -> None:
    add_row(db, 0, vector=True, model=MODEL)  # done
    add_row(db, 1, vector=False, model=None)  # never embedded
    add_row(db, 2, vector=True, model="model-a")  # another model, sorts before
    add_row(db, 3, vector=True, model="model-c")  # another model, sorts after
    add_row(db, 4, vector=True, model=None)  # a vector of no recorded model
    add_row(db, 5, vector=False, model=None, embedding_error="rejected")  # given up on
    add_row(db, 6, vector=True, model=MODEL, inserted_at="2020-01-01T00:00:00Z")  # old, done
    with transaction(db.sessions) as session:
        backlog = queue.backlog(session, MODEL)
        assert queue.pending_for(session, "user-1", MODEL) == 2  # rows 1 and 4
    assert (backlog.pending, backlog.failed) == (4, 1)
    with db.engine.connect() as conn:
        oldest = conn.execute(
            text("SELECT extract(epoch FROM now() - '2026-01-01T00:00:00Z'::timestamptz)")
        ).scalar_one()
    assert backlog.oldest_age_s == pytest.approx(float(oldest), abs=60)


def test_an_empty_backlog_is_zero(db: Database) -> None:
    add_row(db, 0, vector=True, model=MODEL)
    with transaction(db.sessions) as session:
        assert queue.backlog(session, MODEL) == queue.Backlog(0, 0.0, 0)


def test_the_pending_count_stops_at_its_limit(db: Database) -> None:
    for n in range(7):
        add_row(db, n, vector=False, model=None)
    with transaction(db.sessions) as session:
        assert queue.backlog(session, MODEL, limit=5).pending == 5
        assert queue.backlog(session, MODEL).pending == 7


@contextmanager
def captured(db: Database) -> Iterator[list[tuple[str, Any]]]:
    statements: list[tuple[str, Any]] = []

    def record(conn: Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        tagged, _, body = statement.partition("*/")
        if "memstrata:cross-user" in tagged and body.lstrip().startswith("SELECT"):
            statements.append((statement, params))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


QUEUE_READS: dict[str, Callable[[Any], object]] = {
    "backlog": lambda session: queue.backlog(session, MODEL),
    "claim": lambda session: queue.claim(session, MODEL, 4, 30.0),
}


def rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's nodes on memory_embeddings produced or filtered away."""
    own = 0
    if plan.get("Relation Name") == "memory_embeddings" or "Index Name" in plan:
        own = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
        own += int(plan.get("Rows Removed by Index Recheck", 0))
    return max([own] + [rows_read(p) for p in plan.get("Plans", [])])


@pytest.mark.parametrize("name", QUEUE_READS)
def test_queue_statements_read_the_backlog_not_the_table(db: Database, name: str) -> None:
    """2000 rows with a vector of the current model and 3 without: each cross-user
    statement (the per-user ones are bounded by one user's rows) may
    touch the 3 (and the index entries leading to them), not the 2000. Sequential scans
    are priced out so the test does not depend on the planner's view of a small table;
    a full index scan still shows as 2000 rows read."""
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, "
                "embedding, embedding_model) SELECT 'user-' || (g % 5), 'row-' || g, 0, 't', "
                "CAST(:v AS vector), :m FROM generate_series(1, 2000) g"
            ),
            {"v": VECTOR, "m": MODEL},
        )
    for n in range(3):
        add_row(db, 10_000 + n, vector=False, model=None)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE memory_embeddings")
    with captured(db) as statements, transaction(db.sessions) as session:
        QUEUE_READS[name](session)
    assert statements
    with db.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, params in statements:
            explained = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params or {}
            ).scalar_one()
            assert rows_read(explained[0]["Plan"]) < 100, statement
        conn.rollback()


def test_a_locked_table_ends_the_count_in_two_seconds(db: Database) -> None:
    """/readyz and /metrics read the backlog: with memory_embeddings locked (a migration)
    they did not answer within 20 s."""
    with db.engine.connect() as holder:
        holder.execute(text("BEGIN; LOCK TABLE memory_embeddings IN ACCESS EXCLUSIVE MODE"))
        started = time.monotonic()
        with pytest.raises(OperationalError, match="statement timeout"), db.sessions() as s:
            queue.backlog(s, "m")
        assert time.monotonic() - started < queue.BACKLOG_TIMEOUT_MS / 1000 + 1.5
        holder.execute(text("ROLLBACK"))
    with db.sessions() as s:
        assert queue.backlog(s, "m").pending >= 0  # and it counts again

"""Which users the re-embedding queue serves, on the real PostgreSQL: a worker keeps the
list of users with rows waiting (finding them groups every pending row, ~0.7 s at a
million after a model change) and goes round it instead of recomputing it per claim."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, event, text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import queue

MODEL = "model-b"


def waiting(db: Database, user: str, rows: int) -> None:
    """``rows`` rows of ``user`` without a vector."""
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text) "
                "SELECT :u, :p || g, 0, 'text' "
                "FROM generate_series(1, :n) g"
            ),
            {"u": user, "p": f"{user}-{time.time_ns()}-", "n": rows},
        )


class Clock:
    """Each reading is 10 ms after the one before: a grouping then 'takes' 10 ms, and
    its list is kept for 20 x that, 200 ms (a few readings)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01
        return self.now


@contextmanager
def users_statements(db: Database) -> Iterator[list[str]]:
    """The cross-user 'which users have rows waiting' statements run meanwhile."""
    seen: list[str] = []

    def record(conn: Connection, cursor: Any, statement: str, *_: Any) -> None:
        if "memstrata:cross-user:embedding_queue.users" in statement:
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def claim_users(db: Database, n: int, turns: queue.PendingUsers) -> list[str]:
    """The users of one claim of ``n`` rows (leases taken and kept)."""
    with transaction(db.sessions) as session:
        return [c.user_id for c in queue.claim(session, MODEL, n, 60.0, users=turns)]


def test_a_kept_list_is_gone_round_without_grouping_the_backlog_again(db: Database) -> None:
    for user in ("ann", "bob", "cat"):
        waiting(db, user, 4)
    clock = Clock()
    turns = queue.PendingUsers(refresh_factor=20.0, clock=clock)
    with users_statements(db) as seen:
        rounds = [sorted(claim_users(db, 2, turns)) for _ in range(3)]
    assert rounds == [["ann", "bob"], ["ann", "cat"], ["bob", "cat"]]  # in turn, oldest first
    assert len(seen) == 1  # one grouping for three claims


def test_a_user_with_rows_waiting_since_is_served_once_the_list_expires(db: Database) -> None:
    waiting(db, "ann", 10)
    clock = Clock()
    turns = queue.PendingUsers(refresh_factor=20.0, clock=clock)
    assert claim_users(db, 2, turns) == ["ann", "ann"]
    waiting(db, "bob", 1)  # e.g. a turn written during an embedding outage
    assert claim_users(db, 2, turns) == ["ann", "ann"]  # the kept list: bob is not in it
    clock.now += 3600.0  # any grouping cost x 20 is long past
    assert sorted(claim_users(db, 2, turns)) == ["ann", "bob"]


def test_a_kept_list_that_ran_dry_is_recomputed_within_the_claim(db: Database) -> None:
    waiting(db, "ann", 2)
    turns = queue.PendingUsers(refresh_factor=20.0, clock=Clock())
    assert claim_users(db, 2, turns) == ["ann", "ann"]
    waiting(db, "bob", 3)
    with users_statements(db) as seen:
        assert claim_users(db, 2, turns) == ["bob", "bob"]  # not an empty claim and a pause
    assert len(seen) == 1


def test_without_a_kept_list_every_claim_finds_the_users_again(db: Database) -> None:
    waiting(db, "ann", 4)
    with users_statements(db) as seen, transaction(db.sessions) as session:
        queue.claim(session, MODEL, 1, 60.0)
        queue.claim(session, MODEL, 1, 60.0)
    assert len(seen) == 2


def test_what_the_shares_leave_goes_to_the_users_who_have_more(db: Database) -> None:
    waiting(db, "ann", 1)
    waiting(db, "bob", 10)
    waiting(db, "cat", 1)
    turns = queue.PendingUsers(refresh_factor=20.0, clock=Clock())
    taken = claim_users(db, 6, turns)
    assert sorted(taken) == ["ann", "bob", "bob", "bob", "bob", "cat"]
    with db.engine.connect() as conn:
        bobs = conn.execute(
            text(
                "SELECT id FROM memory_embeddings WHERE user_id = 'bob' "
                "AND embedding_claimed_until IS NOT NULL ORDER BY id"
            )
        ).scalars()
        first = conn.execute(
            text("SELECT id FROM memory_embeddings WHERE user_id = 'bob' ORDER BY id LIMIT 4")
        ).scalars()
        assert list(bobs) == list(first)  # bob's oldest rows, none twice
    # ann and cat had nothing more: the list goes on with bob alone, no new grouping
    with users_statements(db) as seen:
        assert claim_users(db, 3, turns) == ["bob", "bob", "bob"]
    assert seen == []


def test_a_list_recomputed_mid_claim_skips_nobody(db: Database) -> None:
    """The kept list runs dry part-way through a claim and a new one is computed: the users
    it picks beyond what the claim still needs are the ones whose rows the claim just took
    (they are forgotten, which moves the rotation back), so the next claim starts with the
    first user not served."""
    waiting(db, "ann", 2)
    waiting(db, "bob", 2)
    turns = queue.PendingUsers(refresh_factor=20.0, clock=Clock())
    assert sorted(claim_users(db, 2, turns)) == ["ann", "bob"]
    for user in ("cat", "dan", "eve", "fay"):
        waiting(db, user, 3)
    assert sorted(claim_users(db, 4, turns)) == ["ann", "bob", "cat", "dan"]
    assert sorted(claim_users(db, 2, turns)) == ["eve", "fay"]


def test_a_running_model_is_written_at_most_once_per_tenth_of_its_live_window(
    db: Database,
) -> None:
    """Every replica's worker announces its model every round; the row is rewritten only
    when its time is a tenth of the live window old."""

    def seen_at() -> object:
        with db.engine.connect() as conn:
            return conn.execute(text("SELECT seen_at FROM embedding_models")).scalar_one()

    with transaction(db.sessions) as session:
        assert queue.announce_model(session, MODEL, live_s=600.0) == MODEL
    first = seen_at()
    with transaction(db.sessions) as session:
        assert queue.announce_model(session, MODEL, live_s=600.0) == MODEL
    assert seen_at() == first  # 60 s have not passed: no write
    with transaction(db.sessions) as session:
        assert queue.announce_model(session, MODEL, live_s=0.0) == MODEL
    assert seen_at() != first

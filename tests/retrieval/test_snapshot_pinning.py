"""Snapshot jobs do not keep evicted indexes in memory.

A snapshot job can wait long before it runs (the writer lets a burst of loads pass, up to
``MAX_SETTLE_WAIT_S``, and then runs the jobs ahead of it). It used to hold the whole index
it was made for, so under a churn of first loads the evicted indexes stayed alive — many
times the cache's byte budget — and were then encoded and written anyway. Here the burst
is a ``writer.loading()`` block, which holds every write back as a long load would.

Rows go through the real repository into the real database; their vectors are random (what
matters is the size of the indexes, not what the rows mean).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.jobs import KeyedJobs
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.rounds import format_round
from memstrata.retrieval.snapshot import SnapshotWriter
from memstrata.retrieval.staging import content_hash
from memstrata.retrieval.user_index import UserIndex

from .stored import insert_rows

MODEL = "test-random-384"
USERS = [f"churn{i}" for i in range(6)]
ROWS = 60
MIN_ROWS = 50  # every user's first load schedules a snapshot


def _write(db: Database, user: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    chunks = []
    for i in range(ROWS):
        body = format_round(f"Turn {i} of {user}: the lake, the kayak, the lantern.", "Noted.")
        vector = rng.standard_normal(384).astype(np.float32)
        chunks.append(
            NewChunk(
                f"sessions/{user}/{i}",
                0,
                body,
                content_hash(body),
                start + timedelta(minutes=i),
                vector.tolist(),
                MODEL,
                [f"{user}:{i}"],
            )
        )
    insert_rows(db, user, chunks)


@pytest.fixture
def users(db: Database) -> Database:
    for seed, user in enumerate(USERS):
        _write(db, user, seed)
    return db


@pytest.fixture
def writer(users: Database) -> Iterator[SnapshotWriter]:
    writer = SnapshotWriter(users.sessions, MIN_ROWS, settle_s=0.05)
    yield writer
    writer.close()


def snapshotted(db: Database) -> set[str]:
    with db.engine.connect() as conn:
        return set(conn.execute(text("SELECT user_id FROM memory_index_snapshots")).scalars())


def alive(refs: list[weakref.ref[UserIndex]]) -> tuple[int, int]:
    """How many of these indexes are still in memory, and their bytes."""
    gc.collect()
    held = [ix for ref in refs if (ix := ref()) is not None]
    return len(held), sum(ix.approx_bytes() for ix in held)


def one_index_bytes(db: Database) -> int:
    return IndexCache(db.sessions).get(USERS[0], MODEL).approx_bytes()


def test_queued_jobs_keep_no_evicted_index_alive_nor_write_it(
    users: Database, writer: SnapshotWriter
) -> None:
    one = one_index_bytes(users)
    budget = int(one * 1.5)  # one user's index fits, two do not
    cache = IndexCache(users.sessions, max_bytes=budget, snapshots=writer)
    refs: list[weakref.ref[UserIndex]] = []
    with writer.loading():  # a burst of first loads: every job waits for its end
        for _ in range(2):
            for user in USERS:
                refs.append(weakref.ref(cache.get(user, MODEL)))
                count, held = alive(refs)
                # What the cache holds, plus at most one index a job is working on.
                assert held <= budget + one, count
                assert count <= cache.stats().users + 1
        assert writer.written == 0  # the jobs are queued, not done
    assert writer.idle()
    # When the jobs ran only the last user was resident: the others were not written.
    assert snapshotted(users) == {USERS[-1]}
    # The idle writer holds nothing of the jobs it ran.
    del cache
    assert alive(refs) == (0, 0)


def test_every_resident_user_gets_its_snapshot(users: Database, writer: SnapshotWriter) -> None:
    cache = IndexCache(users.sessions, snapshots=writer)  # no byte budget: all stay
    with writer.loading():
        for user in USERS:
            cache.get(user, MODEL)
    assert writer.idle()
    assert snapshotted(users) == set(USERS)
    assert writer.written == len(USERS)


def test_an_evicted_users_snapshot_is_written_once_it_is_loaded_again(
    users: Database, writer: SnapshotWriter
) -> None:
    cache = IndexCache(
        users.sessions, max_bytes=int(one_index_bytes(users) * 1.5), snapshots=writer
    )
    with writer.loading():
        first = cache.get(USERS[0], MODEL)
        cache.get(USERS[1], MODEL)
        with first.lock:
            assert first.export() is None  # evicted: nothing to write
        del first
    assert writer.idle()
    assert snapshotted(users) == {USERS[1]}
    cache.get(USERS[0], MODEL)  # a cold load, which schedules the write again
    assert writer.idle()
    assert snapshotted(users) == {USERS[0], USERS[1]}


def test_a_job_still_pending_for_an_evicted_index_writes_the_users_next_load(
    users: Database, writer: SnapshotWriter
) -> None:
    """The next load's own job is not queued (one is pending for the user): the pending one
    exports what is resident when it runs."""
    cache = IndexCache(
        users.sessions, max_bytes=int(one_index_bytes(users) * 1.5), snapshots=writer
    )
    with writer.loading():
        cache.get(USERS[0], MODEL)
        cache.get(USERS[1], MODEL)  # evicts USERS[0]; both jobs wait
        reloaded = cache.get(USERS[0], MODEL)  # evicts USERS[1]
    assert writer.idle()
    assert snapshotted(users) == {USERS[0]}
    with reloaded.lock:
        assert reloaded.unsnapshotted == 0  # exported by the job it found pending


def test_a_job_whose_index_is_evicted_while_it_waits_gives_up_its_turn(
    users: Database, writer: SnapshotWriter
) -> None:
    """It does not wait out the burst (up to ``MAX_SETTLE_WAIT_S``) ahead of the jobs of
    users still held."""
    cache = IndexCache(users.sessions, max_users=1, snapshots=writer)
    with writer.loading():  # the burst goes on ...
        cache.get(USERS[0], MODEL)
        cache.get("nobody", MODEL)  # evicts USERS[0]; an empty index schedules nothing
        assert writer.idle(timeout=10)  # ... but the job is done
    assert snapshotted(users) == set()


def test_an_idle_job_thread_holds_nothing_of_its_last_job() -> None:
    class Payload:
        pass

    payload = Payload()
    ref = weakref.ref(payload)
    jobs: KeyedJobs[str, Payload] = KeyedJobs("test-jobs", lambda k, p: None, lambda k, e: None)
    jobs.submit("a", payload)
    del payload
    assert jobs.idle()
    gc.collect()
    assert ref() is None
    jobs.close()

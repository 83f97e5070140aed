"""The claims of a re-embedding worker that died or stopped are taken back at once, not
after the lease (two minutes); a live worker's claims never are.

Real PostgreSQL; a real worker process killed with SIGKILL, a worker's database connection
ended with ``pg_terminate_backend``; the embedding API is the fake of ``fault_server.py``,
one that answers slowly for the worker that must hold its rows while it is killed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.logs import event_fields
from memstrata.retrieval import api_probe, claimer, healing, queue
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from tests.waiting import wait_for

from .fault_server import FaultServer
from .healing_support import deferred, fault_api_as_embedder  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
# "A few seconds", against the lease's two minutes.
TAKEN_WITHIN_S = 10.0
# The slow API's pause per 1,000 characters: a claim's request outlasts every test here.
SLOW_S = 60.0
# A deferred row's text: a few hundred characters, so the slow API takes minutes over a
# claim of them.
LONG = "turn {} " + "garden " * 60


def leased(db: Database) -> int:
    """Rows without a vector whose lease runs."""
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM memory_embeddings WHERE embedding IS NULL "
                    "AND embedding_claimed_until > now()"
                )
            ).scalar_one()
        )


def heal(healer: VectorHealer, within_s: float = TAKEN_WITHIN_S) -> float:
    """Run ``healer`` until nothing waits; how long it took (fails after ``within_s``)."""
    began = time.monotonic()
    while healer.backlog().pending:
        assert time.monotonic() - began < within_s, (
            f"{healer.backlog().pending} rows still wait after {within_s} s "
            f"({leased_rows(healer)} leased)"
        )
        if not healer.run_once().claimed:
            time.sleep(0.1)
    return time.monotonic() - began


def leased_rows(healer: VectorHealer) -> int:
    with healer._sessions() as session:
        return int(
            session.execute(
                text("SELECT count(*) FROM memory_embeddings WHERE embedding_claimed_until > now()")
            ).scalar_one()
        )


def lock_holders(db: Database) -> list[int]:
    """The backends holding a claimer lock (the workers')."""
    with db.engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                    "AND classid = CAST(:cls AS integer)"
                ),
                {"cls": claimer.LOCK_CLASS},
            ).scalars()
        )


def terminate(db: Database, pids: list[int]) -> None:
    with db.engine.connect() as conn:
        for pid in pids:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    wait_for(lambda: not set(pids) & set(lock_holders(db)), 10, "the backend to end")


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [event_fields(r) for r in caplog.records if event_fields(r).get("event") == name]


def slow_embedder(server: FaultServer) -> OpenAICompatibleEmbedder:
    spec = EmbeddingModelSpec(name="fake-model", base_url=server.base_url)
    return OpenAICompatibleEmbedder(spec, max_retries=0, timeout_s=120.0)


def all_embedded_once(db: Database, rows: int) -> None:
    with db.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT count(*), count(embedding), count(DISTINCT (user_id, file_path, "
                "chunk_index)) FROM memory_embeddings"
            )
        ).one()
    assert tuple(found) == (rows, rows, rows)


def test_a_killed_workers_claims_are_taken_at_once(
    db: Database,
    pg_url: str,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """A worker process killed with SIGKILL (an OOM kill) while it holds a claim: another
    worker embeds its rows on its next round. They waited out the whole lease (120 s),
    the restarted process's worker too, with /readyz degraded meanwhile."""
    deferred(db, embedder, "alice", 6, LONG)
    deferred(db, embedder, "bob", 6, LONG)
    with FaultServer("slow-by-length") as slow, open(tmp_path / "worker.log", "wb") as log:
        slow.delay_s = SLOW_S
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.retrieval.claiming_worker", pg_url, slow.base_url],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: leased(db) > 0, 60, "a claim by the worker process")
            held = leased(db)
        finally:
            worker.kill()
            worker.wait(10)
        healer = VectorHealer(db.sessions, embedder)
        with caplog.at_level("WARNING"):
            took = heal(healer)
    assert held == 8  # its batch: the rows it was embedding
    assert healing.LEASE_S == 120.0  # still the fallback
    assert took < TAKEN_WITHIN_S
    all_embedded_once(db, 12)
    (reclaimed,) = events(caplog, "embedding.heal.reclaimed")
    assert reclaimed["rows"] == held


def test_a_worker_whose_database_connection_ended_loses_its_claims_at_once(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
) -> None:
    """The worker's own connection ended (``pg_terminate_backend``, a network cut): its
    claims count as a dead worker's. If that worker lives on and finishes its batch, its
    write-back skips the rows the other worker stored meanwhile."""
    deferred(db, embedder, "alice", 8, LONG)
    with FaultServer("slow-by-length") as slow, slow_embedder(slow) as slow_api:
        slow.delay_s = SLOW_S
        first = VectorHealer(db.sessions, slow_api, batch=8, interval_s=0.1)
        first.start()
        thread = first._thread
        try:
            wait_for(lambda: leased(db) == 8, 30, "a claim by the first worker")
            holders = lock_holders(db)
            assert len(holders) == 1, "the worker holds no lock of its own"
            terminate(db, holders)
            took = heal(VectorHealer(db.sessions, embedder))
        except BaseException:
            first.stop(timeout_s=0.1)  # not left running into the next test
            raise
    # The slow API's server stopped: the first worker's batch ends, and so does the worker.
    first.stop(timeout_s=10)
    assert thread is not None and not thread.is_alive()
    assert took < TAKEN_WITHIN_S
    all_embedded_once(db, 8)


def test_a_stopped_worker_gives_its_claims_back(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``stop()`` (``stop_background``, a SIGTERM of ``memstrata serve``) while the worker
    waits for the API: its rows are claimable at once, although its thread is still in the
    embedding call; they waited for the lease."""
    deferred(db, embedder, "alice", 8, LONG)
    with FaultServer("slow-by-length") as slow, slow_embedder(slow) as slow_api:
        slow.delay_s = SLOW_S
        worker = VectorHealer(db.sessions, slow_api, batch=8, interval_s=0.1)
        worker.start()
        wait_for(lambda: leased(db) == 8, 30, "a claim by the worker")
        thread = worker._thread
        with caplog.at_level("INFO", logger="memstrata.retrieval.healing"):
            worker.stop(timeout_s=0.2)
        assert thread is not None and thread.is_alive()  # still waiting for the API
        assert leased(db) == 0
        took = heal(VectorHealer(db.sessions, embedder))
    thread.join(10)
    assert not thread.is_alive()
    assert took < TAKEN_WITHIN_S
    all_embedded_once(db, 8)
    (given,) = events(caplog, "embedding.heal.given_back")
    assert given["rows"] == 8


def test_two_live_workers_never_embed_a_row_twice(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each worker's round first takes back the claims of workers that are gone: it must
    never take a live worker's. Two workers on two APIs share the backlog; every text is
    sent once, to one of them."""
    for user in ("alice", "bob", "carol"):
        deferred(db, embedder, user, 30, user + " turn {}")
    fault.mode, fault.delay_s = "slow", 0.02
    with FaultServer("slow") as other, slow_embedder(other) as other_api:
        other.delay_s = 0.02
        apis = (embedder, other_api)
        workers = [VectorHealer(db.sessions, api, batch=8, interval_s=0.05) for api in apis]
        with caplog.at_level("WARNING"):
            for worker in workers:
                worker.start()
            try:
                wait_for(lambda: workers[0].backlog().pending == 0, 60, "the backlog to empty")
            finally:
                for worker in workers:
                    worker.stop()
        sent = [
            [t for r in server.requests for t in r.body["input"] if t != api_probe.PROBE_TEXT]
            for server in (fault, other)
        ]
    assert sent[0] and sent[1]  # both took part
    texts = sent[0] + sent[1]
    assert len(texts) == len(set(texts)) == 90
    assert events(caplog, "embedding.heal.reclaimed") == []
    all_embedded_once(db, 90)


def test_reclaim_ends_only_the_claims_of_a_gone_claimer(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """A live claimer's rows and a claim on its lease alone stay claimed; a claimer whose
    lock is gone loses its rows. A claim records a token only while its lock is held."""
    from memstrata.retrieval import claimer  # here: the red run's code has no such module

    live = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine))
    gone = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine))
    live.open()
    gone.open()
    try:
        tokens = {"alice": live.token(), "bob": gone.token(), "carol": None}
        assert tokens["alice"] is not None and tokens["bob"] is not None
        for user, token in tokens.items():  # one user at a time: each claim takes theirs
            deferred(db, embedder, user, 2, LONG)
            with transaction(db.sessions) as session:
                got = queue.claim(session, "fake-model", 8, 60, claimer=token)
            assert [(c.user_id, c.claimed_by) for c in got] == [(user, token)] * 2
        deferred(db, embedder, "dave", 1, LONG)
        with transaction(db.sessions) as session:  # a token whose lock nobody holds
            (unheld,) = queue.claim(session, "fake-model", 8, 60, claimer=12345)
        assert unheld.claimed_by is None
        terminate(db, [holder_of(db, tokens["bob"])])
        with transaction(db.sessions) as session:
            assert sorted(claimer.reclaim(session)) == ["bob", "bob"]
        with transaction(db.sessions) as session:
            assert claimer.reclaim(session) == []
        with db.engine.connect() as conn:
            held: dict[str, int] = dict(
                conn.execute(
                    text(
                        "SELECT user_id, count(*) FROM memory_embeddings WHERE "
                        "embedding_claimed_until > now() GROUP BY user_id"
                    )
                ).all()
            )
        assert held == {"alice": 2, "carol": 2, "dave": 1}  # a live claimer's, leases'
    finally:
        live.close()
        gone.close()


def holder_of(db: Database, token: int) -> int:
    """The backend holding the claimer lock of ``token``."""
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                    "AND objid = CAST(:t AS integer)"
                ),
                {"t": token},
            ).scalar_one()
        )


def test_a_worker_that_lost_its_lock_takes_a_new_one(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its claim finds the lock gone: the rows rely on the lease (and are still embedded),
    the worker says so, and takes a new token after ``RETAKE_S``."""
    from memstrata.retrieval import claimer  # here: the red run's code has no such module

    monkeypatch.setattr(claimer, "RETAKE_S", 0.2)
    healer = VectorHealer(db.sessions, embedder)
    assert healer.claimer is not None
    healer.claimer.open()
    try:
        first = healer.claimer.token()
        terminate(db, lock_holders(db))
        deferred(db, embedder, "alice", 2, LONG)
        with caplog.at_level("WARNING"):
            assert healer.run_once().embedded == 2
        assert len(events(caplog, "embedding.heal.claimer_lost")) == 1
        assert healer.claimer.held() is None
        time.sleep(0.3)
        second = healer.claimer.token()
        assert second is not None and second != first
    finally:
        healer.claimer.close()

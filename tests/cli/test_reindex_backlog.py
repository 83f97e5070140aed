"""`memstrata reindex` says what it is about to embed, and when a running server's worker
holds those rows: it took 53 s in silence, then said "embedded 0 chunk(s)"."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.indexer import Indexer
from tests.cli.cli_env import clean_env, run_cli


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


def test_reindex_names_its_backlog_and_the_rows_a_worker_holds(env: None, db: Database) -> None:
    indexer = Indexer(db.sessions, None)  # stored without a vector, as during an outage
    for n, said in enumerate(["I live in Lyon", "I work nights", "I adopted a puppy"]):
        indexer.index_turn("u", "s", n, said, "")
    with db.engine.begin() as conn:  # a server's worker leased two of them just now
        conn.execute(
            text(
                "UPDATE memory_embeddings SET embedding_claimed_until = now() + "
                "interval '1 hour' WHERE id IN (SELECT id FROM memory_embeddings "
                "WHERE user_id = 'u' ORDER BY id LIMIT 2)"
            )
        )
    code, out, err = run_cli("reindex", "--user", "u")
    assert code == 0, out + err
    lines = [line for line in err.splitlines() if not line.startswith("{")]
    assert lines[0] == "embedding 3 chunk(s) of u without a vector…"
    assert lines[1].startswith("2 of them are being embedded by a running server's worker")
    assert "embedded 3 chunk(s) for u" in out

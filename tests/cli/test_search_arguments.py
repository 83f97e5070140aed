"""`memstrata search` checks its arguments before it opens anything, and says when the
user it searched holds nothing at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.db.database import Database
from memstrata.retrieval.indexer import Indexer
from tests.cli.cli_env import clean_env, run_cli

# Nothing listens on port 1: a command that opened the database would fail on it.
NO_DATABASE = "postgresql://nobody@127.0.0.1:1/none"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "alice", "x", "-k", "0"], "top_k must be an integer from 1 to 100"),
        (
            ["--user", "alice", "x", "--source", "files"],
            "sources must be a non-empty list drawn from memory, conversation, notes; "
            "got ['files']",
        ),
        (["--user", "alice", ""], "query is blank: send the words to search for"),
        (["--user", "alice", " "], "query is blank: send the words to search for"),
        (["--user", "alice", "x" * 4001], "query is 4001 characters; the limit is 4000"),
        (["--user", "", "x"], "user_id must be a non-empty string"),
    ],
)
def test_bad_arguments_are_refused_before_the_database_is_opened(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], message: str
) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATABASE_URL": NO_DATABASE,
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        },
    )
    code, out, err = run_cli("search", *args)
    assert code == 1, out + err
    assert err.strip().splitlines() == [f"error: {message}"], err


def test_a_user_with_no_memory_is_named(boxes: Path, db: Database) -> None:
    Indexer(db.sessions, None).index_turn("someone", "s", 0, "the blue door is in Lisbon", "")
    code, out, _ = run_cli("search", "--user", "nobody-at-all", "blue door")
    assert code == 0
    assert "no results for 'blue door'" in out
    assert "user nobody-at-all has no memory files and no indexed conversations" in out
    # A user who holds something, but nothing that matches: no such line.
    code, out, _ = run_cli("search", "--user", "someone", "zebra")
    assert code == 0 and "no results" in out and "has no memory" not in out

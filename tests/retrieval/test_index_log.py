"""An indexing write logs one ``index.updated`` line at INFO however many rounds it held
(an import of 10k rounds wrote 10k lines, two thirds of a busy server's log); the lines
per file stay at DEBUG."""

from __future__ import annotations

import logging

import pytest

from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import Round


def test_a_batch_logs_one_summary_line(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    rounds = [Round("import", i, f"turn {i} about bees", "ok", None) for i in range(40)]
    with caplog.at_level(logging.DEBUG, logger="memstrata.retrieval"):
        Indexer(db.sessions, None).index_rounds("alice", rounds, embed=False)
    events = [(r.levelno, event_fields(r)) for r in caplog.records if event_fields(r)]
    summary = [f for level, f in events if f["event"] == "index.updated"]
    assert [level for level, f in events if f["event"] == "index.updated"] == [logging.INFO]
    assert summary[0]["files"] == 40 and summary[0]["inserted"] == 40
    assert summary[0]["user_id"] == "alice" and summary[0]["file_path"] is None
    per_file = [f for level, f in events if f["event"] == "index.updated.file"]
    assert len(per_file) == 40
    assert {level for level, f in events if f["event"] == "index.updated.file"} == {logging.DEBUG}


def test_one_round_names_its_file(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="memstrata.retrieval"):
        Indexer(db.sessions, None).index_rounds("bob", [Round("s1", 0, "hi", "hello", None)])
    [summary] = [
        event_fields(r) for r in caplog.records if event_fields(r).get("event") == "index.updated"
    ]
    assert (summary["file_path"], summary["files"]) == ("sessions/s1/0", 1)

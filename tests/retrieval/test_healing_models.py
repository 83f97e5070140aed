"""Self-healing vectors of several embedding models on the real PostgreSQL: rows of another
model, replicas of two models, a worker announcing its model, a row replaced while it was
embedded, the failure's log line. The API is the fake of ``fault_server.py``."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.logs import event_fields
from memstrata.retrieval import queue
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer

from .fault_server import FaultServer
from .healing_support import (  # noqa: F401  (pytest finds the fixture by its name)
    fault_api_as_embedder,
    vectors,
    write_turns,
)

pytestmark = pytest.mark.timeout(60)


def test_rows_of_another_model_are_re_embedded(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    write_turns(db, embedder, ["alice"])
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE memory_embeddings SET embedding_model = 'old-model'"))
    healer = VectorHealer(db.sessions, embedder)
    assert healer.backlog().pending == 3
    assert healer.run_once().embedded == 3
    with db.engine.connect() as conn:
        models = conn.execute(text("SELECT DISTINCT embedding_model FROM memory_embeddings"))
        assert [m for (m,) in models] == ["fake-model"]


def models(db: Database) -> list[str | None]:
    with db.engine.connect() as conn:
        return list(
            conn.execute(text("SELECT embedding_model FROM memory_embeddings ORDER BY id"))
            .scalars()
            .all()
        )


def test_replicas_of_two_models_do_not_re_embed_each_others_rows(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rolling model change: replicas of the old and the new model run at once. The
    vectors move to the running model that appeared last; a worker of the other model
    leaves rows with another model's vector alone (it used to re-embed them back, and the
    two went round and round) but still embeds rows that have no vector at all. An old
    replica restarting mid-rollout does not take the lead back; once the new model's
    replicas are all gone (a rollback), the old model's take the vectors back."""
    live_s = 1.0
    write_turns(db, embedder, ["alice"])  # three rows with fake-model's vectors
    spec = EmbeddingModelSpec(name="new-model", base_url=fault.base_url)
    with OpenAICompatibleEmbedder(spec, max_retries=0) as new_embedder:
        old = VectorHealer(db.sessions, embedder, model_live_s=live_s)
        new = VectorHealer(db.sessions, new_embedder, model_live_s=live_s)
        assert old.run_once().claimed == 0  # the old model's replicas: nothing to do
        with caplog.at_level("WARNING"):
            assert new.run_once().embedded == 3  # a new-model replica appears
            assert old.run_once().claimed == 0  # not back to fake-model
            restarted = VectorHealer(db.sessions, embedder, model_live_s=live_s)
            assert restarted.run_once().claimed == 0  # an old replica restarts: still not
        assert models(db) == ["new-model"] * 3
        noted = [
            event_fields(r)
            for r in caplog.records
            if event_fields(r).get("event") == "embedding.heal.other_model_chosen"
        ]
        assert [(n["model"], n["chosen"]) for n in noted] == [("fake-model", "new-model")] * 2
        fault.mode = "500"  # a turn written through an old replica during an outage
        Indexer(db.sessions, embedder).index_turn("bob", "s1", 0, "no vector yet", "")
        fault.mode = "ok"
        assert old.run_once().embedded == 1  # a row with no vector at all: any model helps
        assert sorted(models(db), key=str) == ["fake-model"] + ["new-model"] * 3
        assert new.run_once().embedded == 1  # then moved to the chosen model
        assert models(db) == ["new-model"] * 4
        time.sleep(live_s + 0.5)  # the new model's replicas are gone: a rollback
        assert old.run_once().embedded == 4
        assert models(db) == ["fake-model"] * 4


def test_a_running_worker_announces_its_model(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    healer = VectorHealer(db.sessions, embedder, interval_s=0.1)
    healer.start()
    try:
        seen: list[object] = []
        for _ in range(50):
            with db.engine.connect() as conn:
                seen = list(conn.execute(text("SELECT model, seen_at FROM embedding_models")))
            if len(seen) == 1 and seen[0][0] == "fake-model":  # type: ignore[index]
                break
            time.sleep(0.1)
        assert [row[0] for row in seen] == ["fake-model"]  # type: ignore[index]
    finally:
        healer.stop()


def test_a_row_replaced_during_embedding_is_not_resurrected(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    fault.mode = "500"
    indexer = Indexer(db.sessions, embedder)
    indexer.index_turn("alice", "s1", 0, "old text", "")
    with transaction(db.sessions) as session:
        (claimed,) = queue.claim(session, "fake-model", 10, 60)
    indexer.index_turn("alice", "s1", 0, "new text", "")  # the writer replaces the row
    healer = VectorHealer(db.sessions, embedder)
    assert healer._write_back([claimed], {claimed.id: [0.5] * 8}) == (0, [])
    assert [t for _, t, *_ in vectors(db)] == ["User: new text"]


def test_embedding_failed_names_user_model_batch_and_error(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fault.mode = "500"
    with caplog.at_level("WARNING", logger="memstrata.retrieval.indexer"):
        report = Indexer(db.sessions, embedder).index_turn("alice", "s1", 0, "hello", "hi")
    assert report.inserted == 1 and report.embedding_failed == 1  # stored all the same
    (fields,) = [
        event_fields(r)
        for r in caplog.records
        if event_fields(r).get("event") == "embedding.failed"
    ]
    assert fields["user_id"] == "alice"
    assert fields["model"] == "fake-model"
    assert fields["batch_size"] == 1
    assert "HTTP 500" in fields["error"]

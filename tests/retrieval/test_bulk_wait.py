"""A write's own passage embedding waits a bounded time for a slot behind other writes and
imports, then stores its texts without a vector (healed in the background) and answers: a
soak run's single-turn writes waited up to 296 s, minutes after their clients had gone.
The background worker's requests wait as long as it takes."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.breaker import BACKGROUND_OWNER, BulkLaneBusyError, Lanes, bulk_owner
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.local_server import LocalEmbeddingServer

pytestmark = pytest.mark.timeout(60)


def test_a_waiter_gives_up_after_give_up_s_and_leaves_the_queue() -> None:
    lanes = Lanes(bulk_slots=1)
    with lanes.bulk("importer"):  # the slot is taken for the whole test
        began = time.monotonic()
        with pytest.raises(BulkLaneBusyError), lanes.bulk("writer", give_up_s=0.3):
            pass
        assert 0.25 <= time.monotonic() - began < 2.0
        assert lanes.waiting == 0
        served: list[str] = []

        def background() -> None:
            with lanes.bulk(BACKGROUND_OWNER):  # no give_up_s: waits its turn
                served.append("healer")

        thread = threading.Thread(target=background, daemon=True)
        thread.start()
        time.sleep(0.5)
        assert served == [] and lanes.waiting == 1
    thread.join(5)
    assert served == ["healer"]


def test_a_turn_behind_an_import_is_stored_without_a_vector_and_answers(
    db: Database, embedding_server: LocalEmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = OpenAICompatibleEmbedder(embedding_server.model_spec, bulk_wait_s=0.3)
    indexer = Indexer(db.sessions, embedder)
    try:
        with embedder.lanes.bulk("importer"):  # another user's import holds the slot
            began = time.monotonic()
            with bulk_owner("bob"):
                report = indexer.index_turn(
                    "bob", "s1", 0, "I keep bees", "Nice", datetime.now(UTC)
                )
            took = time.monotonic() - began
        assert took < 5.0
        assert (report.embedded, report.embedding_failed) == (0, 1)
        [failed] = [
            f for f in map(event_fields, caplog.records) if f.get("event") == "embedding.failed"
        ]
        assert failed["user_id"] == "bob" and "MEMSTRATA_EMBEDDING_BULK_WAIT_S" in failed["error"]
        assert embedder.breaker.state == "closed"  # the API was not asked, nor failed
        assert indexer.count_missing("bob") == 1  # healed in the background later
    finally:
        embedder.close()

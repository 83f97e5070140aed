"""An inline batch of turns embeds for at most MEMSTRATA_EMBEDDING_FILE_BUDGET_S where the
background worker runs, as a memory-file write does: the turns not sent by then are stored
without a vector, counted as deferred, and the worker embeds them. 300 inline turns on a
busy host had taken 462 s, long after the client had given up.

The slow embedding API is the fault-injection fake in its slow mode.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from tests.api.auth import AuthHeader
from tests.api.test_batch_turns import BATCH, _served, _turn
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

TURNS = 48  # 6 requests of 8 texts
PER_TEXT_S = 0.1  # the slow fake's delay per text: 0.8 s a request, 4.8 s for the batch
BUDGET_S = 1.0


def _vectors(db: Database) -> list[bool]:
    """Whether each of alice's rows has a vector, in turn order."""
    with db.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT embedding IS NOT NULL FROM memory_embeddings WHERE user_id = 'alice' "
                "ORDER BY split_part(file_path, '/', 3)::int"
            )
        )
        return [bool(r[0]) for r in found]


@pytest.fixture
def slow_api() -> Iterator[FaultServer]:
    with FaultServer("ok") as fake:
        yield fake


def test_an_inline_batch_answers_after_its_budget_and_the_worker_embeds_the_rest(
    settings: Settings,
    db: Database,
    auth: AuthHeader,
    slow_api: FaultServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = EmbeddingModelSpec(name="fake-model", base_url=slow_api.base_url)
    tuned = settings.model_copy(
        update={
            "embedding_models": [spec],
            "embedding_file_budget_s": BUDGET_S,
            "embedding_max_retries": 0,
            "embedding_heal_interval_s": 60.0,  # only a wake brings the vectors in time
        }
    )
    with _served(tuned, db) as (_, client):
        slow_api.mode, slow_api.delay_s = "slow", PER_TEXT_S
        caplog.set_level(logging.INFO, logger="memstrata.retrieval.indexer")
        turns = [
            _turn("s1", i, f"turn {i} about the harbour and its lanterns") for i in range(TURNS)
        ]
        began = time.monotonic()
        response = client.post(BATCH, headers=auth("alice"), json={"turns": turns})
        took = time.monotonic() - began
        slow_api.delay_s = 0.0  # the worker's turn: quick, to keep the test short
        assert response.status_code == 200, response.text
        body = response.json()
        # The budget, then the one request in flight (and slack for a busy host); all
        # six requests inline would take 4.8 s.
        assert took < BUDGET_S + 8 * PER_TEXT_S + 1.0, took
        assert body["inserted"] == TURNS and body["embedding_failed"] == 0
        assert 8 <= body["embedded"] <= 16, body
        assert body["deferred"] == TURNS - body["embedded"]
        stored = _vectors(db)
        assert len(stored) == TURNS
        assert sum(stored) >= body["embedded"]  # the worker may be under way already
        [event] = [
            event_fields(r)
            for r in caplog.records
            if event_fields(r).get("event") == "index.rounds.deferred"
        ]
        assert (event["user_id"], event["embedded"], event["deferred"]) == (
            "alice",
            body["embedded"],
            body["deferred"],
        )
        wait_for(lambda: all(_vectors(db)), 30, lambda: f"vectors: {_vectors(db)}")

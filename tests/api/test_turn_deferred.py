"""Turns a write's embedding budget (MEMSTRATA_EMBEDDING_FILE_BUDGET_S) left without a
vector: counted on /metrics by the route that wrote them
(``memstrata_turn_embeddings_deferred_total{write="batch"|"turn"}``), and embedded by the
worker the write wakes. A single turn's ``deferred`` is normally 0; it is 1 when its one
request waited for the passage lane (behind another user's slow import) until its budget
had passed: the turn answers then, stored, rather than after the other user's request.

The slow embedding API is the fault-injection fake in its slow mode.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from fastapi.testclient import TestClient

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_batch_budget import _vectors
from tests.api.test_batch_turns import BATCH, _served, _turn
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

BUDGET_S = 1.0
IMPORT_TURNS = 8  # bob's import: one request of 8 texts
IMPORT_PER_TEXT_S = 0.75  # 6 s for that request: alice's turn waits behind it


def deferred_turns(client: TestClient) -> dict[str, float]:
    """``memstrata_turn_embeddings_deferred_total`` by its ``write`` label."""
    found = re.findall(
        r'^memstrata_turn_embeddings_deferred_total\{write="(\w+)"\} (\S+)$',
        client.get("/metrics").text,
        re.M,
    )
    return {write: float(value) for write, value in found}


def tuned(settings: Settings, fake: FaultServer) -> Settings:
    spec = EmbeddingModelSpec(name="fake-model", base_url=fake.base_url)
    return settings.model_copy(
        update={
            "embedding_models": [spec],
            "embedding_file_budget_s": BUDGET_S,
            "embedding_max_retries": 0,
            "embedding_heal_interval_s": 60.0,  # only a wake brings the vectors in time
        }
    )


def test_a_batch_counts_its_deferred_turns_on_metrics(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    with FaultServer("ok") as fake, _served(tuned(settings, fake), db) as (_, client):
        assert deferred_turns(client) == {"batch": 0, "turn": 0}
        fake.mode, fake.delay_s = "slow", 0.1  # 0.8 s a request of 8, 4.8 s for 48 turns
        turns = [_turn("s1", i, f"turn {i} about the harbour and its lanterns") for i in range(48)]
        response = client.post(BATCH, headers=auth("alice"), json={"turns": turns})
        fake.delay_s = 0.0
        assert response.status_code == 200, response.text
        deferred = response.json()["deferred"]
        assert deferred >= 48 - 16, response.json()  # the budget, then the request in flight
        assert deferred_turns(client) == {"batch": deferred, "turn": 0}
        wait_for(lambda: all(_vectors(db)), 30, lambda: f"vectors: {_vectors(db)}")
        assert deferred_turns(client) == {"batch": deferred, "turn": 0}  # the worker adds none


def _import(mem: Memstrata) -> None:
    rounds = [Round("import", i, f"imported turn {i} of bob's history") for i in range(8)]
    mem.import_rounds("bob", rounds)


def test_a_turn_that_waited_past_its_budget_is_stored_deferred_and_healed(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    with FaultServer("ok") as fake, _served(tuned(settings, fake), db) as (mem, client):
        fake.mode, fake.delay_s = "slow", IMPORT_PER_TEXT_S
        seen = len(fake.requests)
        importing = threading.Thread(target=_import, args=(mem,))
        importing.start()
        try:
            wait_for(lambda: len(fake.requests) > seen, 10, "bob's import at the embedding API")
            began = time.monotonic()
            response = client.post(
                "/api/memory/conversations/s1/turns",
                headers=auth("alice"),
                json={"turn_index": 0, "user_message": "the lanterns are lit at dusk"},
            )
            took = time.monotonic() - began
            fake.delay_s = 0.0  # the worker's request, once bob's has ended: quick
        finally:
            importing.join(30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["inserted"], body["embedded"], body["deferred"]) == (1, 0, 1), body
        # Its budget and slack for a busy host; not after bob's 6 s request.
        assert took < IMPORT_TURNS * IMPORT_PER_TEXT_S - 1.5, took
        assert deferred_turns(client) == {"batch": 0, "turn": 1}
        wait_for(lambda: _vectors(db) == [True], 30, lambda: f"alice's vector: {_vectors(db)}")

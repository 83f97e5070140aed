"""A big memory file saved through the HTTP API answers after the write's embedding budget
(MEMSTRATA_EMBEDDING_FILE_BUDGET_S) with the spec's answer; the passages left over are
counted on /metrics and embedded by the worker the app started. The slow embedding API is
the fault-injection fake in its slow mode."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from tests.api.auth import AuthHeader
from tests.retrieval.fault_server import FaultServer
from tests.retrieval.test_file_budget import BUDGET_S, PER_TEXT_S, USER, memory_text, open_mem, rows
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def deferred_total(client: TestClient) -> float | None:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("memstrata_file_embeddings_deferred_total "):
            return float(line.split()[1])
    return None


def test_a_big_put_answers_after_its_budget_and_metrics_count_the_rest(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    with FaultServer("ok") as fake:
        spec = EmbeddingModelSpec(name="fake-model", base_url=fake.base_url)
        mem = open_mem(settings, db, spec, BUDGET_S)
        try:
            with TestClient(create_app(memstrata=mem)) as client:  # starts the worker
                got = client.get("/api/config/agent-files/memory", headers=auth(USER))
                assert got.status_code == 200
                wait_for(lambda: mem.indexer.count_missing(USER) == 0, 30, "template vectors")
                assert deferred_total(client) == 0
                fake.mode, fake.delay_s = "slow", PER_TEXT_S
                began = time.monotonic()
                put = client.put(
                    "/api/config/agent-files/memory",
                    json={"content": memory_text(48), "expected_version": got.json()["version"]},
                    headers=auth(USER),
                )
                took = time.monotonic() - began
                fake.delay_s = 0.0
                assert put.status_code == 200, put.text
                assert set(put.json()) == {"name", "file_type", "version", "message"}
                assert took < BUDGET_S + 8 * PER_TEXT_S + 1.5, took
                left = sum(not has for _, has in rows(db))
                counted = deferred_total(client)
                # The worker may have embedded some already; it never adds rows to count.
                assert counted is not None and counted >= left and counted >= 48 - 16
                wait_for(lambda: all(has for _, has in rows(db)), 30, "every row's vector")
        finally:
            mem.close()

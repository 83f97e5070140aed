"""The database pools on ``/metrics``: a pool whose every connection is held shows as in
use up to its limit, the requests waiting for one as ``waiting``, and each wait, once it
ends, in the wait histogram — with the pool really saturated (its connections checked out
and held on the session's PostgreSQL), not a pool's counters set by hand."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.pool import QueuePool

from memstrata.api import create_app
from memstrata.api.metrics import ApiMetrics
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import POOL_TIMEOUT_S
from memstrata.db.open_connections import track
from memstrata.db.pool_watch import pool_stats
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.waiting import wait_for

FILE = "/api/config/agent-files/user"
PREFIX = "memstrata_database_pool_"
HELD_S = 0.4  # how long the waiting request waits, at least

Samples = dict[tuple[str, str, str], float]  # (sample name, pool, le) -> value


def _scrape(client: TestClient) -> Samples:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    return {
        (sample.name, sample.labels.get("pool", ""), sample.labels.get("le", "")): sample.value
        for family in text_string_to_metric_families(answer.text)
        if family.name.startswith(PREFIX)
        for sample in family.samples
    }


def test_a_saturated_pool_shows_on_metrics_while_a_request_waits(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    del db  # the schema, and tables emptied
    mem = Memstrata.open(settings.model_copy(update={"db_pool_size": 1}))  # 1 + 2 overflow
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            assert client.get(FILE, headers=auth("alice")).status_code == 200
            idle = _scrape(client)
            held = [mem.db.engine.connect() for _ in range(3)]
            try:
                full = _scrape(client)
                with ThreadPoolExecutor(1) as executor:
                    answer = executor.submit(client.get, FILE, headers=auth("alice"))
                    wait_for(
                        lambda: _scrape(client)[(f"{PREFIX}waiting", "main", "")] == 1,
                        POOL_TIMEOUT_S,
                        "the request to wait for a connection",
                    )
                    time.sleep(HELD_S)
                    held.pop().close()
                    assert answer.result(timeout=10).status_code == 200
            finally:
                for connection in held:
                    connection.close()
            after = _scrape(client)
    finally:
        mem.close()

    assert idle[(f"{PREFIX}connections_limit", "main", "")] == 3
    assert idle[(f"{PREFIX}connections_limit", "search_check", "")] == 4  # 2 + 2 overflow
    assert idle[(f"{PREFIX}connections_in_use", "main", "")] == 0
    assert full[(f"{PREFIX}connections_in_use", "main", "")] == 3
    assert full[(f"{PREFIX}waiting", "main", "")] == 0
    assert after[(f"{PREFIX}waiting", "main", "")] == 0
    assert after[(f"{PREFIX}connections_in_use", "main", "")] == 0

    def waited_longer(samples: Samples, bound: str) -> float:
        """Checkouts that waited longer than ``bound`` seconds."""
        count = samples[(f"{PREFIX}wait_seconds_count", "main", "")]
        return count - samples[(f"{PREFIX}wait_seconds_bucket", "main", bound)]

    # The one request's checkout waited HELD_S and more; none other waited a millisecond.
    assert waited_longer(idle, "0.001") == 0
    assert waited_longer(after, "0.25") == 1
    assert waited_longer(after, "0.001") == 1
    assert after[(f"{PREFIX}wait_seconds_sum", "main", "")] >= HELD_S
    assert (
        after[(f"{PREFIX}wait_seconds_count", "main", "")]
        > idle[(f"{PREFIX}wait_seconds_count", "main", "")]
    )
    assert after[(f"{PREFIX}timeouts_total", "main", "")] == 0


def test_a_checkout_given_up_while_the_database_is_lost_is_counted_as_refused(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    """The monitor's verdict (its gate closed, as at db.lost) ends a request's wait for a
    connection of a full pool: a 503 counted as refused, not as a pool timeout."""
    del db
    mem = Memstrata.open(settings.model_copy(update={"db_pool_size": 1}))  # 1 + 2 overflow
    gate = track(mem.db.engine).gate
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            assert client.get(FILE, headers=auth("alice")).status_code == 200
            before = _scrape(client)
            held = [mem.db.engine.connect() for _ in range(3)]
            try:
                with ThreadPoolExecutor(1) as executor:
                    answer = executor.submit(client.get, FILE, headers=auth("alice"))
                    wait_for(
                        lambda: _scrape(client)[(f"{PREFIX}waiting", "main", "")] == 1,
                        POOL_TIMEOUT_S,
                        "the request to wait for a connection",
                    )
                    gate.close("db.lost: the test's verdict")
                    assert answer.result(timeout=5).status_code == 503
            finally:
                gate.open()
                for connection in held:
                    connection.close()
            after = _scrape(client)
    finally:
        mem.close()
    assert before[(f"{PREFIX}refused_total", "main", "")] == 0
    assert before[(f"{PREFIX}refused_total", "search_check", "")] == 0
    assert after[(f"{PREFIX}refused_total", "main", "")] == 1
    assert after[(f"{PREFIX}timeouts_total", "main", "")] == 0
    assert after[(f"{PREFIX}waiting", "main", "")] == 0


def test_a_scrape_does_not_wait_for_a_connection_of_a_saturated_pool(
    settings: Settings, db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    """With an embedding API a scrape counts the re-embedding backlog, on a pooled
    connection: it waited POOL_TIMEOUT_S (10 s, Prometheus' default scrape timeout) for
    one, so the scrape that would show the pool full timed out itself."""
    del db
    mem = Memstrata.open(settings.model_copy(update={"db_pool_size": 1}), embedder=embedder)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            assert "\nmemstrata_embeddings_pending " in client.get("/metrics").text
            held = [mem.db.engine.connect() for _ in range(3)]
            try:
                started = time.monotonic()
                full = client.get("/metrics").text
                took_s = time.monotonic() - started
            finally:
                for connection in held:
                    connection.close()
            after = client.get("/metrics").text
    finally:
        mem.close()
    assert took_s < POOL_TIMEOUT_S / 5, took_s
    assert f'\n{PREFIX}connections_in_use{{pool="main"}} 3.0\n' in full
    assert "\nmemstrata_embeddings_pending " not in full  # unread: no sample, not a stale one
    assert "\nmemstrata_embeddings_pending " in after


def test_the_pool_help_says_the_engine_s_timeout_and_overflow(db: Database) -> None:
    """The help texts state the main engine's real pool timeout and limit per
    MEMSTRATA_DB_POOL_SIZE, read from the pool make_engine built, not a copy of them."""
    stats = pool_stats(db.engine)
    assert stats is not None
    pool = db.engine.pool
    assert isinstance(pool, QueuePool) and stats.limit % pool.size() == 0
    metrics = ApiMetrics()
    metrics.watch_pools(lambda: {"main": stats})
    helps = {
        family.name: family.documentation
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
    }
    per_size = stats.limit // pool.size()
    assert f"MEMSTRATA_DB_POOL_SIZE × {per_size} for main" in helps[f"{PREFIX}connections_limit"]
    assert f"pool timeout ({pool.timeout():g} s)" in helps[f"{PREFIX}timeouts"]
